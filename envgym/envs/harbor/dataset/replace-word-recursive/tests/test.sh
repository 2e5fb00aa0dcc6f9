#!/bin/bash
# Reward 1 when the .txt files use 'color' and the .md file is unchanged.
mkdir -p /logs/verifier
if cmp -s /app/docs/intro.txt /tests/intro.txt && cmp -s /app/docs/sub/art.txt /tests/art.txt && cmp -s /app/docs/readme.md /tests/readme.md; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
