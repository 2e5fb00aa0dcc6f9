#!/bin/bash
# Reward 1 when /app/table.csv is table.tsv with commas.
mkdir -p /logs/verifier
if cmp -s /app/table.csv /tests/expected.csv; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
