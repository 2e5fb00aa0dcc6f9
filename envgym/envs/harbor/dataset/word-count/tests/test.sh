#!/bin/bash
# Reward 1 when /app/count.txt holds exactly the word count of /app/poem.txt.
mkdir -p /logs/verifier
expected=$(wc -w < /tests/poem.txt | tr -d ' ')
got=$(tr -d ' \n' < /app/count.txt 2>/dev/null)
if [ "$got" = "$expected" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
