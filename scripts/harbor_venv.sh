#!/usr/bin/env bash
# Builds .venv-harbor: the `harbor` package (laude-institute/harbor) in its own venv, since it
# needs Python >= 3.12 and the project's .venv is 3.11.  tests/test_harbor*.py load our Harbor
# tasks with harbor's own task model through it (envgym/envs/harbor/reference.py); nothing in the
# envgym runtime needs it.  Idempotent: does nothing when harbor already imports.
set -euo pipefail
cd "$(dirname "$0")/.."

HARBOR_VERSION=${HARBOR_VERSION:-0.26.0}
VENV=${HARBOR_VENV:-.venv-harbor}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import harbor.models.task.task" >/dev/null 2>&1; then
  exit 0
fi

# A Python >= 3.12: $HARBOR_PYTHON, else python3.13/3.12 on PATH, else pyenv's 3.12.
pick() {
  for cand in "${HARBOR_PYTHON:-}" python3.13 python3.12 /root/.pyenv/versions/3.12*/bin/python "$(command -v pyenv >/dev/null 2>&1 && pyenv root)"/versions/3.1[2-9]*/bin/python; do
    [ -n "$cand" ] || continue
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  return 1
}
PY=$(pick) || { echo "harbor_venv: harbor $HARBOR_VERSION needs Python >= 3.12 and none was found (set HARBOR_PYTHON)" >&2; exit 1; }

rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip 2> >(grep -v "is ignored: it is neither" >&2)
"$VENV/bin/pip" install -q "harbor==$HARBOR_VERSION" 2> >(grep -v "is ignored: it is neither" >&2)
"$VENV/bin/python" -c "import harbor.models.task.task" || { echo "harbor_venv: harbor installed but its task model does not import" >&2; exit 1; }
