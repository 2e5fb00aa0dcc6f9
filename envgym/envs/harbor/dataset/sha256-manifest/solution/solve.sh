#!/bin/bash
set -e
cd /app && sha256sum payload.bin > payload.sha256
