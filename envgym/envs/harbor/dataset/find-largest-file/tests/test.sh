#!/bin/bash
# Reward 1 when /app/largest.txt names a/b/deep.dat.
mkdir -p /logs/verifier
if [ "$(tr -d "\n" < /app/largest.txt 2>/dev/null | sed "s#^\./##")" = "a/b/deep.dat" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
