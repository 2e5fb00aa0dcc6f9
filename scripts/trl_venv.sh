#!/usr/bin/env bash
# Builds .venv-trl: Hugging Face TRL in its own venv, for `envgym bench train-trl` (one GRPO
# iteration of envgym beside one of TRL's GRPOTrainer; docs/TRAINER.md, "Beside TRL").  Nothing
# in envgym imports TRL: the benchmark runs envgym/benchmarks/trl_grpo_child.py with this venv's python.
# torch is pinned to the CPU build the main venv uses (an unpinned torch pulls a multi-GB CUDA
# build) and transformers to the main venv's, so both sides run the same model code.
# Idempotent: does nothing when trl already imports at the pinned version.
set -euo pipefail
cd "$(dirname "$0")/.."

TRL_VERSION=${TRL_VERSION:-1.16.0}
TORCH_VERSION=${TRL_TORCH_VERSION:-2.13.0}
TRANSFORMERS_VERSION=${TRL_TRANSFORMERS_VERSION:-5.24.0}
VENV=${TRL_VENV:-.venv-trl}
PY=${TRL_PYTHON:-python3.11}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import trl, sys; sys.exit(trl.__version__ != '$TRL_VERSION')" >/dev/null 2>&1; then
  exit 0
fi

rm -rf "$VENV"
"$PY" -m venv "$VENV"
quiet() { "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
quiet "$VENV/bin/pip" install -q --upgrade pip
quiet "$VENV/bin/pip" install -q "torch==$TORCH_VERSION"
quiet "$VENV/bin/pip" install -q "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION" "trl==$TRL_VERSION"
"$VENV/bin/python" -c "import trl; from trl import GRPOConfig, GRPOTrainer" \
  || { echo "trl_venv: trl installed but GRPOTrainer does not import" >&2; exit 1; }
