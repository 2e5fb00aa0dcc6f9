#!/bin/bash
set -e
grep ' ERROR ' /app/app.log | sed -E 's/.*\[([a-z]+)\].*/\1/' | sort | uniq -c | awk '{print $2, $1}' > /app/errors.txt
