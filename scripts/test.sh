#!/usr/bin/env bash
# One command on a fresh machine: set up, then run the whole test suite (heavy tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/lint.sh --no-types
# The type check takes minutes cold: it runs beside the suite, and its verdict gates all the same.
types_log="$(mktemp)"
bash scripts/typecheck.sh >"$types_log" 2>&1 &
types=$!
# Two workers (CI has two cores); how tests are grouped and ordered on them: tests/conftest.py.
status=0
.venv/bin/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder "$@" || status=$?
if ! wait "$types"; then
  cat "$types_log"
  echo "type check failed (scripts/typecheck.sh)" >&2
  status=1
fi
rm -f "$types_log"
exit "$status"
