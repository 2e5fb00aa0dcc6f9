#!/bin/bash
# Reward 1 when unique_ips.txt holds the number of distinct IPs.
mkdir -p /logs/verifier
if [ "$(tr -d " \n" < /app/unique_ips.txt 2>/dev/null)" = "77" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
