#!/bin/bash
# Reward 1 when /app/sorted.txt is numbers.txt sorted numerically, descending.
mkdir -p /logs/verifier
if cmp -s /app/sorted.txt /tests/expected.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
