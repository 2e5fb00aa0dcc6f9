#!/bin/bash
# Reward 1 when /app/slice.txt is lines 10-20 of big.txt.
mkdir -p /logs/verifier
if cmp -s /app/slice.txt /tests/expected.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
