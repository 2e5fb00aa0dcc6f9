#!/bin/bash
set -e
find /app/tree -type f -name '*.*' | sed 's/.*\.//' | sort | uniq -c | awk '{print $2, $1}' > /app/ext_counts.txt
