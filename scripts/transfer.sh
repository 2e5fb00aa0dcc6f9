#!/usr/bin/env bash
# The transfer experiment end to end (docs/TRANSFER.md): the exact commands, each stage timed with
# /usr/bin/time -v into runs/transfer/logs/STAGE.{out,err}; a stage that finished is skipped on a
# rerun (delete runs/transfer/logs/STAGE.done to redo it), so a killed run resumes where it stopped.
#   bash scripts/transfer.sh            # every stage
#   bash scripts/transfer.sh sft filter # only these (in this order), e.g. for a pilot
# Needs the set-up of scripts/setup.sh (.venv); the τ² stage needs .venv-tau2 (docs/TAU2.md).
set -euo pipefail
cd "$(dirname "$0")/.."
E=.venv/bin/envgym
R=runs/transfer
SAMPLE=${TRANSFER_FILTER_SAMPLE:-40}  # training bundles the filter samples (of 95)
mkdir -p "$R/logs"
BUDGET=(--max-tokens 128 --max-turns 3)

stage() {
  local name=$1
  shift
  if [[ -e "$R/logs/$name.done" ]]; then
    echo "$name: done before, skipped"
    return
  fi
  echo "$name: $*"
  /usr/bin/time -v -o "$R/logs/$name.time" "$@" >"$R/logs/$name.out" 2>"$R/logs/$name.err"
  touch "$R/logs/$name.done"
  grep -E "Elapsed|Maximum resident|User time|System time" "$R/logs/$name.time" | sed "s/^/  /"
}

eval_model() {  # eval_model NAME MODEL TARGET [extra args]: greedy pass@1, one JSON summary
  local name=$1 model=$2 target=$3
  shift 3
  stage "$name" "$E" eval "$target" --model "$model" --temperature 0 "${BUDGET[@]}" \
    --episode-tokens 384 --concurrency 16 --db "sqlite:///$R/eval.db" --json "$@"
}

run() {
  case $1 in
    synth) stage synth "$E" synth --categories specs --per-category 1 --tasks-per-bundle 4 \
      --difficulties 1,2 --max-rows 10 --held-out-share 0.2 --workers 2 --out "$R/suite" --json ;;
    sft) stage sft "$E" sft configs/transfer/sft.yaml --json ;;
    filter) stage filter "$E" filter "$R/suite" --split train --model "$R/cold-start" --k 4 \
      --temperature 0.8 "${BUDGET[@]}" --episode-tokens 384 --sample "$SAMPLE" \
      --out "$R/kept.json" --json ;;
    grpo) stage grpo "$E" train configs/transfer/grpo.yaml ;;
    heldout) eval_model heldout-cold "$R/cold-start" "$R/suite" --split held_out
      eval_model heldout-grpo "$R/grpo/policy" "$R/suite" --split held_out
      stage compare "$E" compare "$R/logs/heldout-cold.out" "$R/logs/heldout-grpo.out" --json ;;
    tau2) eval_model tau2-cold "$R/cold-start" tau2-mock-v0 -k 1
      eval_model tau2-grpo "$R/grpo/policy" tau2-mock-v0 -k 1
      stage compare-tau2 "$E" compare "$R/logs/tau2-cold.out" "$R/logs/tau2-grpo.out" --json ;;
    mcp) for server in filesystem git sqlite; do
        eval_model "mcp-$server-cold" "$R/cold-start" "mcp-suite-$server-v0"
        eval_model "mcp-$server-grpo" "$R/grpo/policy" "mcp-suite-$server-v0"
        stage "compare-mcp-$server" "$E" compare "$R/logs/mcp-$server-cold.out" \
          "$R/logs/mcp-$server-grpo.out" --json
      done ;;
    *) echo "unknown stage $1 (synth sft filter grpo heldout tau2 mcp)" >&2; exit 2 ;;
  esac
}

stages=("$@")
if [[ ${#stages[@]} -eq 0 ]]; then
  stages=(synth sft filter grpo heldout tau2 mcp)
fi
for s in "${stages[@]}"; do
  run "$s"
done
