#!/bin/bash
# Reward 1 when fizzbuzz.py prints FizzBuzz up to 30 and up to 1.
mkdir -p /logs/verifier
out=$(cd /tmp && python3 /app/fizzbuzz.py 30 2>/dev/null)
one=$(cd /tmp && python3 /app/fizzbuzz.py 1 2>/dev/null)
if [ "$out" = "$(cat /tests/expected30.txt)" ] && [ "$one" = 1 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
