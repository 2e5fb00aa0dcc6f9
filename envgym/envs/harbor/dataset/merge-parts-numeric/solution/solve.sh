#!/bin/bash
set -e
cd /app/parts && cat $(ls part*.txt | sort -V) > /app/merged.txt
