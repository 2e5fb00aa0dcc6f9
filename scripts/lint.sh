#!/usr/bin/env bash
# Lint and format gate, run first by scripts/test.sh (a second or two): ruff's rules as configured in
# pyproject.toml, and the tree exactly as `ruff format` writes it. Fix with:
#   .venv/bin/ruff check --fix . && .venv/bin/ruff format .
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
