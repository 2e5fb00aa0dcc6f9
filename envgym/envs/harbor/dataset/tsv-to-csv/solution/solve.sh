#!/bin/bash
set -e
tr '\t' ',' < /app/table.tsv > /app/table.csv
