#!/bin/bash
set -e
awk -F, 'NR>1 {s+=$3} END {printf "%.2f\n", s}' /app/sales.csv > /app/total.txt
