#!/bin/bash
set -e
sort -n -r /app/numbers.txt > /app/sorted.txt
