#!/bin/bash
# Reward 1 when only the server port changed to 8080.
mkdir -p /logs/verifier
if cmp -s /app/config.ini /tests/expected.ini; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
