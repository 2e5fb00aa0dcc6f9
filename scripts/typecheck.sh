#!/usr/bin/env bash
# mypy over envgym/: the core and envgym/trainer/ ([tool.mypy] in pyproject.toml; measured 196 s
# cold on two busy cores, 5 s with its cache in .mypy_cache).  Part of the lint gate (scripts/lint.sh); the test
# command runs it beside the suite instead of before it (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/mypy
