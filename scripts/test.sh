#!/usr/bin/env bash
# One command on a fresh machine: set up, then run the whole test suite (heavy tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/lint.sh
# Two workers (CI has two cores); how tests are grouped and ordered on them: tests/conftest.py.
exec .venv/bin/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder "$@"
