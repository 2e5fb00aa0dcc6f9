#!/bin/bash
set -e
mkdir -p /app/project/src /app/project/tests /app/project/docs
echo '# project' > /app/project/README.md
: > /app/project/src/__init__.py
