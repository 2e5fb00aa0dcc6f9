#!/usr/bin/env bash
# Lint and format gate: ruff's rules as configured in pyproject.toml, the tree exactly as
# `ruff format` writes it, and the types (scripts/typecheck.sh; `--no-types` leaves them to the
# caller, as scripts/test.sh does). Fix with:
#   .venv/bin/ruff check --fix . && .venv/bin/ruff format .
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
if [[ "${1:-}" != --no-types ]]; then
  bash scripts/typecheck.sh
fi
