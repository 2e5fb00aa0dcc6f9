#!/bin/bash
# Reward 1 when only the .sh files in /app/bin are executable.
mkdir -p /logs/verifier
if [ -x /app/bin/a.sh ] && [ -x /app/bin/b.sh ] && [ -f /app/bin/data.txt ] && [ -z "$(find /app/bin/data.txt /app/bin/run.cfg -perm /111)" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
