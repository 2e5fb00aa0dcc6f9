#!/bin/bash
set -e
cat > /app/greet.sh <<'EOF'
#!/bin/bash
if [ $# -lt 1 ]; then echo 'usage: greet.sh NAME' >&2; exit 2; fi
echo "Hello, $1!"
EOF
chmod +x /app/greet.sh
