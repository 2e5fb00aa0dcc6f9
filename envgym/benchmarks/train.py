"""``envgym bench train``: one GRPO update on SmolLM2 on CPU, naive logits vs the efficient path.

The update is the trainer's own (:class:`envgym.trainer.update.Update`: the no-grad π_old recompute,
then one optimizer step — forward, GRPO loss with entropy, backward, AdamW) on ``8 × 512``-token
sequences of the embedded SmolLM2-135M (fp32; 64 prompt tokens and 448 trained tokens per row,
one microbatch).  Only the way π_θ's per-token log-probs (and entropies) are computed differs:

* ``naive`` — the usual code: ``model(...).logits`` ``[B, T, V]``, ``log_softmax``, gather;
  entropy from the same ``[B, T, V]`` tensor (V = 49,152: 0.8 GB per fp32 copy, several copies
  live in backward);
* ``efficient`` — the trainer's memory-efficient configuration:
  :class:`envgym.trainer.policy.TrainablePolicy` (the final hidden states and the LM head through
  ``envgym.kernels.logprob.selected_logprobs``:
  vocabulary chunks, recompute in backward, no ``[N, V]``) with length-balanced microbatches of
  ``micro_tokens = 512`` (gradient accumulation: the same gradient as one pass);
* ``chunked_onebatch`` — the log-prob op alone: ``selected_logprobs`` with the naive variant's
  single microbatch, so the difference to ``naive`` is the op and nothing else.

Each variant runs in a fresh subprocess, so its peak RSS (``ru_maxrss``) is its own: model
load, optimizer state and the update together (``*_load_rss_gib`` is the RSS before the update
starts, for reference).  A watchdog kills a child whose RSS passes ``ENVGYM_BENCH_RSS_CAP_GIB``
(default: 80 % of the memory available when the benchmark starts) and reports that instead of
letting a shared machine swap or OOM.  ``--quick``: 2 × 96 tokens (a smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from envgym.bench import BenchResult

VARIANTS = ("naive", "efficient", "chunked_onebatch")
EFFICIENT_MICRO_TOKENS = 512
PROMPT_TOKENS = 64


def _available_gib() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return 8.0


def _rss_gib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def _child_run(variant: str, rows: int, tokens: int) -> dict[str, float]:
    """In the child process: build everything, time one update, report peak RSS."""
    import torch

    from envgym import embedded
    from envgym.trainer.batch import Sample, TrainBatch
    from envgym.trainer.config import config_from_dict
    from envgym.trainer.policy import TrainablePolicy
    from envgym.trainer.update import Update

    class NaivePolicy(TrainablePolicy):
        """π_θ from the full ``[B, T, V]`` logits (what the efficient path avoids)."""

        def logprobs(
            self, batch: TrainBatch, *, temperature: float, with_entropy: bool = False
        ) -> tuple[torch.Tensor, torch.Tensor | None]:
            logits = self.model(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
            ).logits  # [B, T, V]
            logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
            logp = logp_all.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1) * batch.mask
            entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
            return logp, entropy

    torch.manual_seed(0)
    model = embedded.load_model("float32")
    model.train(False)
    config = config_from_dict(
        {
            "envs": [{"id": "bench"}],
            "rollout": {"group_size": 2, "prompts": rows // 2},
            "optimizer": {"lr": 1e-6},
            # naive / chunked_onebatch: the whole batch at once; efficient: microbatches
            "micro_tokens": EFFICIENT_MICRO_TOKENS if variant == "efficient" else rows * tokens,
            "minibatches": 1,
        }
    )
    cls = NaivePolicy if variant == "naive" else TrainablePolicy
    policy = cls(model, chunk_size=config.chunk_size)
    update = Update(config, policy, None, pad_id=int(model.config.eos_token_id or 0))
    gen = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    samples = []
    for b in range(rows):
        ids = torch.randint(0, vocab, (tokens,), generator=gen).tolist()
        mask = [0] * PROMPT_TOKENS + [1] * (tokens - PROMPT_TOKENS)
        samples.append(
            Sample(
                token_ids=ids,
                loss_mask=mask,
                engine_logp=[-8.0 if m else 0.0 for m in mask],
                kept=[None] * tokens,
                routes=None,
                advantage=1.0 if b % 2 else -1.0,
                reward=float(b % 2),
                group=b // 2,
                task_id=f"bench{b // 2}",
                policy_version=0,
            )
        )
    load_rss = _rss_gib(os.getpid())
    t0 = time.perf_counter()
    metrics, skipped = update.run(samples, step=0)
    step_s = time.perf_counter() - t0
    if skipped is not None:
        raise RuntimeError(f"the update was skipped: {skipped}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB → GiB
    return {
        "step_s": step_s,
        "peak_rss_gib": peak,
        "load_rss_gib": load_rss,
        "loss": float(metrics["loss"]),
        "entropy": float(metrics["entropy"]),
    }


def _spawn(variant: str, rows: int, tokens: int, cap_gib: float) -> dict[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "envgym.benchmarks.train",
        "--child",
        variant,
        "--rows",
        str(rows),
        "--tokens",
        str(tokens),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watched = 0.0
    while proc.poll() is None:
        watched = max(watched, _rss_gib(proc.pid))
        if watched > cap_gib:
            proc.kill()
            proc.wait()
            raise RuntimeError(
                f"{variant}: RSS passed the {cap_gib:.1f} GiB cap "
                "(ENVGYM_BENCH_RSS_CAP_GIB); killed"
            )
        time.sleep(0.05)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} child failed ({proc.returncode}): {err.strip()[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def run(quick: bool = False) -> BenchResult:
    rows, tokens = (2, 96) if quick else (8, 512)
    cap = float(os.environ.get("ENVGYM_BENCH_RSS_CAP_GIB") or 0.8 * _available_gib())
    results = {v: _spawn(v, rows, tokens, cap) for v in VARIANTS}
    naive, eff, op = results["naive"], results["efficient"], results["chunked_onebatch"]
    metrics = {
        "naive_peak_rss_gib": naive["peak_rss_gib"],
        "efficient_peak_rss_gib": eff["peak_rss_gib"],
        "naive_step_s": naive["step_s"],
        "efficient_step_s": eff["step_s"],
        "chunked_onebatch_peak_rss_gib": op["peak_rss_gib"],
        "chunked_onebatch_step_s": op["step_s"],
        "naive_load_rss_gib": naive["load_rss_gib"],
        "efficient_load_rss_gib": eff["load_rss_gib"],
        "rss_ratio_naive_over_efficient": naive["peak_rss_gib"] / eff["peak_rss_gib"],
        "step_ratio_efficient_over_naive": eff["step_s"] / naive["step_s"],
        "loss_abs_diff": max(abs(naive["loss"] - r["loss"]) for r in (eff, op)),
        "entropy_abs_diff": max(abs(naive["entropy"] - r["entropy"]) for r in (eff, op)),
        "rows": float(rows),
        "tokens_per_row": float(tokens),
    }
    units = {k: "GiB" for k in metrics if k.endswith("_gib")}
    units.update({k: "s" for k in metrics if k.endswith("_s")})
    units.update({k: "ratio" for k in metrics if "ratio" in k})
    units.update(
        loss_abs_diff="nats", entropy_abs_diff="nats", rows="rows", tokens_per_row="tokens"
    )
    return BenchResult(
        benchmark="train",
        metrics=metrics,
        units=units,
        notes={
            "naive_peak_rss_gib": "baseline: full [B, T, V] logits",
            "efficient_peak_rss_gib": f"target <= 3 GiB (micro_tokens {EFFICIENT_MICRO_TOKENS})",
            "chunked_onebatch_peak_rss_gib": "envgym.kernels.logprob, one microbatch like naive",
            "efficient_step_s": "target <= 1.0x naive_step_s",
            "naive_load_rss_gib": "before the update (model, optimizer, batch)",
            "loss_abs_diff": "the two paths compute the same loss",
        },
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=VARIANTS, required=True)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args(argv)
    if args.tokens <= PROMPT_TOKENS or args.rows < 2:
        parser.error(f"--tokens must be > {PROMPT_TOKENS} and --rows ≥ 2")
    sys.stdout.write(json.dumps(_child_run(args.child, args.rows, args.tokens)) + "\n")


if __name__ == "__main__":
    main()
