#!/bin/bash
# Reward 1 when /app/errors.txt lists the ERROR count per service, sorted.
mkdir -p /logs/verifier
if cmp -s /app/errors.txt /tests/expected.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
