#!/bin/bash
set -e
cat > /app/fizzbuzz.py <<'EOF'
import sys
for i in range(1, int(sys.argv[1]) + 1):
    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)
EOF
