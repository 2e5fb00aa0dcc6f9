#!/bin/bash
set -e
cd /app/logs && tar -czf /app/logs.tar.gz *.log && rm -f -- *.log
