#!/bin/bash
# Reward 1 when payload.sha256 is sha256sum's line for payload.bin.
mkdir -p /logs/verifier
if cmp -s /app/payload.sha256 /tests/expected.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
