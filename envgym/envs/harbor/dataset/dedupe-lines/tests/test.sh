#!/bin/bash
# Reward 1 when /app/unique.txt is the first-occurrence dedupe and names.txt is untouched.
mkdir -p /logs/verifier
if cmp -s /app/unique.txt /tests/expected.txt && cmp -s /app/names.txt /tests/names.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
