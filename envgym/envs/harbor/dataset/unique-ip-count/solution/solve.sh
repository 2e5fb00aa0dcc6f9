#!/bin/bash
set -e
cut -d' ' -f1 /app/access.log | sort -u | wc -l > /app/unique_ips.txt
