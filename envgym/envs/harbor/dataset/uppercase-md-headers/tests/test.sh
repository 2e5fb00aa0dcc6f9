#!/bin/bash
# Reward 1 when only the header lines of notes.md are upper-cased.
mkdir -p /logs/verifier
if cmp -s /app/notes.md /tests/expected.md; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
