#!/bin/bash
# Reward 1 when /app/total.txt holds the amount column's sum to two decimals.
mkdir -p /logs/verifier
if [ "$(tr -d " \n" < /app/total.txt 2>/dev/null)" = "2001.90" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
