#!/bin/bash
set -e
cd /app/data && find . -type f -printf '%s %P\n' | sort -n -r | head -n 1 | cut -d' ' -f2- > /app/largest.txt
