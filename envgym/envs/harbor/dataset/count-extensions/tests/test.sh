#!/bin/bash
# Reward 1 when /app/ext_counts.txt counts files per extension, sorted.
mkdir -p /logs/verifier
if cmp -s /app/ext_counts.txt /tests/expected.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
