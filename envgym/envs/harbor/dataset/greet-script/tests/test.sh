#!/bin/bash
# Reward 1 when greet.sh greets by name and refuses a missing argument with status 2.
mkdir -p /logs/verifier
out=$(/app/greet.sh "Ada Lovelace" 2>/dev/null)
err=$(/app/greet.sh 2>&1 >/dev/null); code=$?
if [ -x /app/greet.sh ] && [ "$out" = "Hello, Ada Lovelace!" ] && [ "$code" = 2 ] && [ "$err" = "usage: greet.sh NAME" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
