#!/bin/bash
# Reward 1 when logs.tar.gz holds exactly a.log b.log c.log with their content and only README is left.
mkdir -p /logs/verifier
members=$(tar -tzf /app/logs.tar.gz 2>/dev/null | sed "s#^\./##" | sort | tr "\n" " ")
content=$(tar -xzOf /app/logs.tar.gz ./b.log 2>/dev/null || tar -xzOf /app/logs.tar.gz b.log 2>/dev/null)
if [ "$members" = "a.log b.log c.log " ] && [ "$content" = "log b" ] && [ "$(ls /app/logs)" = README ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
