#!/usr/bin/env bash
# The GPU path's end-to-end check on one NVIDIA GPU (docs/GPU.md): the Triton kernels compiled
# against float64 torch references with timings, GRPO updates of random SmolLM2/SmolMoE-shaped
# policies, the local engine's start-up check, the vLLM weight sync and probe against a stand-in
# server, and vLLM's routed experts where vLLM is installed.  One PASS/FAIL/SKIP line per check;
# exit status 0 only when nothing failed (2: no CUDA device, or the time limit was hit).
#
#   bash scripts/gpu_check.sh          # on the GPU machine; 40 s on an H200 (docs/GPU.md)
#   bash scripts/gpu_check.sh --cpu    # dry run on CPU at toy sizes (Triton interpreted)
#
# Needs torch, triton, transformers, safetensors, numpy and httpx; the project need not be
# installed.  PYTHON picks the interpreter (default python3); GPU_CHECK_TIMEOUT the limit in
# seconds (default 480: the check is sized to finish well inside 8 minutes).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
python="${PYTHON:-python3}"
# scripts/ too: gpu_check.py imports its parts from beside it (Python adds the script's folder
# itself, but not under PYTHONSAFEPATH).
export PYTHONPATH="$root:$root/scripts${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# Tokenizer threads are not needed and would compete with the stand-in server's thread.
export TOKENIZERS_PARALLELISM=false

if [[ "${1:-}" == "--cpu" ]]; then
  export TRITON_INTERPRET=1  # read when the kernel modules are imported
else
  unset TRITON_INTERPRET     # the GPU check is about the compiled kernels
fi

if ! command -v "$python" >/dev/null 2>&1; then
  echo "FAIL  setup  no Python interpreter '$python' (set PYTHON)"
  exit 2
fi

timeout --kill-after=10 "${GPU_CHECK_TIMEOUT:-480}" "$python" scripts/gpu_check.py "$@"
status=$?
if [[ $status -eq 124 || $status -eq 137 ]]; then
  echo "FAIL  timeout  the check did not finish within ${GPU_CHECK_TIMEOUT:-480} s"
  exit 2
fi
exit "$status"
