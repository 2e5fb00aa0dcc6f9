#!/bin/bash
# Reward 1 when /app/emails.txt lists the active users' emails, sorted.
mkdir -p /logs/verifier
if cmp -s /app/emails.txt /tests/expected.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
