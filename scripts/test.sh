#!/usr/bin/env bash
# One command on a fresh machine: set up, then run the whole test suite (heavy tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two workers (CI has two cores): heavy tests share one of them (tests/conftest.py), light tests
# fill the other, which roughly halves the wall time of a serial run.
exec .venv/bin/python -m pytest -q -n 2 --dist loadgroup "$@"
