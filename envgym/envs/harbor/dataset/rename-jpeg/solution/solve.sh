#!/bin/bash
set -e
cd /app/photos && for f in *.jpeg; do mv -- "$f" "${f%.jpeg}.jpg"; done
