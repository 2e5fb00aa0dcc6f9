"""``envgym bench train-trl``: one GRPO iteration of envgym beside one of TRL's ``GRPOTrainer``.

Both sides run the same iteration (:mod:`envgym.benchmarks.grpo_task`: the embedded SmolLM2-135M in
fp32 on the CPU, 8 prompts × 8 completions of at most 64 new tokens at temperature 1, the same
string-match reward, AdamW with the same lr/betas/eps, no KL), each in a fresh subprocess so its
peak RSS is its own:

* envgym: :mod:`envgym.benchmarks.grpo_envgym_child` (the trainer's engine, update and weight sync);
* TRL: :mod:`envgym.benchmarks.trl_grpo_child`, run by ``.venv-trl/bin/python`` (scripts/trl_venv.sh);
  envgym never imports TRL.

Reported: each side's rollout / update / total seconds and peak RSS, and the ratios envgym/TRL.
``ENVGYM_BENCH_MICRO_TOKENS`` (a comma list of numbers or ``auto``, e.g. ``512,2048,8192``) runs envgym
once per value (TRL once), for the micro_tokens sweep in docs/TRAINER.md; unset: the trainer's
default (``auto``).  The
children run one after the other, never together (on a shared machine they would share cores).
``--quick`` is refused: one iteration is the smallest unit this comparison has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from envgym.bench import BenchResult

ROOT = Path(__file__).resolve().parents[2]  # the repository (envgym/benchmarks/ is two down)
TRL_VENV = ROOT / ".venv-trl"
TRL_CHILD = Path(__file__).resolve().parent / "trl_grpo_child.py"
TASK_FILE = Path(__file__).resolve().parent / "grpo_task.py"
SIDES = ("rollout_s", "update_s", "total_s", "peak_rss_gib")


def parse_child(stdout: str) -> dict[str, float]:
    """The last line of a child's stdout: its JSON object of numbers (what the library logged
    before it is ignored); ValueError naming what was wrong."""
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    if not lines:
        raise ValueError("the child printed nothing")
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as err:
        raise ValueError(f"the child's last line is not JSON: {lines[-1][:200]!r}") from err
    if not isinstance(data, dict):
        raise ValueError("the child's last line is not a JSON object")
    missing = [k for k in SIDES if not isinstance(data.get(k), (int, float))]
    if missing:
        raise ValueError(f"the child's result lacks {', '.join(missing)}")
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}


def ratios(envgym: dict[str, float], trl: dict[str, float]) -> dict[str, float]:
    """envgym / TRL for each of :data:`SIDES` (below 1: envgym faster or smaller)."""
    return {f"ratio_{k}": envgym[k] / trl[k] if trl[k] else float("nan") for k in SIDES}


def _loadavg() -> float:
    return os.getloadavg()[0]


def _spawn(cmd: list[str], what: str, env: dict[str, str]) -> dict[str, float]:
    load = _loadavg()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = parse_child(proc.stdout)
    out["load1_before"] = load
    out["load1_after"] = _loadavg()
    return out


def envgym_side(micro_tokens: int | str) -> dict[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "envgym.benchmarks.grpo_envgym_child",
        "--micro-tokens",
        str(micro_tokens),
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return _spawn(cmd, f"envgym (micro_tokens {micro_tokens})", env)


def trl_side() -> dict[str, float]:
    from envgym import embedded

    python = TRL_VENV / "bin" / "python"
    if not python.is_file():
        raise RuntimeError(f"{python} does not exist: run scripts/trl_venv.sh first")
    # -I: neither the script's folder nor PYTHONPATH on sys.path — the script's neighbour
    # kernels.py would shadow the HF `kernels` package transformers imports.
    cmd = [str(python), "-I", str(TRL_CHILD), "--model", str(embedded.hf_dir())]
    cmd += ["--task", str(TASK_FILE)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return _spawn(cmd, "TRL", env)


def _micro_tokens() -> list[int | str]:
    """``ENVGYM_BENCH_MICRO_TOKENS``'s values (numbers or ``auto``); unset: the trainer's default."""
    from envgym.trainer.config import TrainConfig

    raw = os.environ.get("ENVGYM_BENCH_MICRO_TOKENS", "").strip()
    if not raw:
        return [TrainConfig().micro_tokens]
    values = [v.strip() for v in raw.split(",") if v.strip()]
    return [v if v == "auto" else int(v) for v in values]


def run(quick: bool = False) -> BenchResult:
    if quick:
        raise ValueError("train-trl has no --quick mode: one iteration is its smallest unit")
    values = _micro_tokens()
    trl = trl_side()
    metrics: dict[str, float] = {f"trl_{k}": v for k, v in trl.items()}
    for mt in values:
        side = envgym_side(mt)
        prefix = "envgym" if len(values) == 1 else f"envgym_mt{mt}"
        metrics.update({f"{prefix}_{k}": v for k, v in side.items()})
        metrics.update({f"{prefix}_{k}": v for k, v in ratios(side, trl).items()})
    units = {k: "GiB" for k in metrics if k.endswith("_gib")}
    units.update({k: "s" for k in metrics if k.endswith("_s")})
    units.update({k: "envgym/TRL" for k in metrics if "_ratio_" in k})
    units.update({k: "load avg" for k in metrics if "load1" in k})
    return BenchResult(
        benchmark="train-trl",
        metrics=metrics,
        units=units,
        notes={"trl_total_s": "GRPOTrainer, max_steps 1 (docs/TRAINER.md, Beside TRL)"},
    )
