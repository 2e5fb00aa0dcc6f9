#!/bin/bash
# Reward 1 when the skeleton exists as described.
mkdir -p /logs/verifier
if [ -d /app/project/src ] && [ -d /app/project/tests ] && [ -d /app/project/docs ] && [ "$(head -n1 /app/project/README.md 2>/dev/null)" = "# project" ] && [ -f /app/project/src/__init__.py ] && [ ! -s /app/project/src/__init__.py ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
