#!/bin/bash
set -e
sed -n '10,20p' /app/big.txt > /app/slice.txt
