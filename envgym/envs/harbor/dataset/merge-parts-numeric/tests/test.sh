#!/bin/bash
# Reward 1 when merged.txt has the parts in numeric order.
mkdir -p /logs/verifier
if cmp -s /app/merged.txt /tests/expected.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
