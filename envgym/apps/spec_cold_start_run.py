"""``envgym cold-start spec-writer``: the writer's specs → SFT → a model folder that writes specs.

Teacher examples (envgym/synth_agents/spec_cold_start.py) for every training domain and seed
train the model with :func:`envgym.trainer.sft.train_sft`; :func:`envgym.trainer.sft.save_policy`
writes the folder with ``spec_prompt`` in its ``sft_run.json``, so ``envgym synth DOMAIN --agent
llm --model FOLDER`` asks it the way it was taught.  ``probe`` then asks it for the specs of the
held-out domains and reports the valid-spec rate (and, with ``probe_base``, the untaught model's
on the same domains, the figure to compare against).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envgym.envs.procedural_kit.spec.note import DomainNote
from envgym.synth_agents.spec_cold_start import probe_specs, split_domains, teacher_turn


@dataclass(frozen=True)
class SpecColdStartConfig:
    held_out: int = 20  # corpus domains never trained on (the probe's)
    seeds: int = 1  # writer seeds per training domain (each a different spec)
    epochs: int = 3
    lr: float = 2e-4
    batch_tokens: int = 2600  # ~2 examples: attention over padded rows is materialized on CPU
    prompt: str = "brief"
    max_tokens: int = 2048  # the probe's reply budget (the writer's specs are ~1.0-1.3k tokens)
    seed: int = 0  # the domain split's and the SFT's
    max_examples: int | None = None  # a seeded subset of the examples (None: all)

    def __post_init__(self) -> None:
        if min(self.seeds, self.epochs) < 1 or self.held_out < 0 or not self.lr > 0:
            raise ValueError("seeds and epochs must be >= 1, held_out >= 0 and lr > 0")
        if self.max_tokens < 64:
            raise ValueError(f"max_tokens must be >= 64, not {self.max_tokens}")
        if self.max_examples is not None and self.max_examples < 1:
            raise ValueError(f"--max-examples must be >= 1, not {self.max_examples}")


def teacher_example(
    note: DomainNote, seed: int, fmt: Any, end_ids: frozenset[int], prompt: str = "brief"
) -> Any:
    """One SFT example: the teacher turn's ids, loss on the written part only."""
    from envgym.trainer.sft_data import SFTExample

    ids, written = teacher_turn(note, seed, fmt, end_ids, prompt)
    return SFTExample(tuple(ids + written), tuple([0] * len(ids) + [1] * len(written)),
                      "gold", "spec-writer-cold-start", f"{note.domain}:seed{seed}")  # fmt: skip


def teacher_examples(
    domains: Sequence[DomainNote], seeds: int, fmt: Any, end_ids: frozenset[int], prompt: str
) -> list[Any]:
    return [teacher_example(n, s, fmt, end_ids, prompt) for n in domains for s in range(seeds)]


def run_spec_cold_start(
    out: Path,
    cfg: SpecColdStartConfig,
    *,
    model: str = "smollm2",
    probe: int = 0,
    probe_base: bool = False,
    on_step: Callable[[Any, int], None] | None = None,
    probe_only: bool = False,
) -> dict[str, Any]:
    """Examples → SFT of ``model`` → ``out``; the summary, with the probe on the first ``probe``
    held-out domains when ``probe`` > 0.  ``probe_only``: ``out`` was taught earlier (its
    ``sft_run.json`` names the split's settings); only the probe runs (a probe of 20 domains
    takes longer than the training itself on 2 cores)."""
    from envgym.models.chat import ChatFormat, end_tokens
    from envgym.trainer.sft import SFTConfig, load_trainable, save_policy, train_sft

    out = Path(out)
    split = split_domains(cfg.held_out, cfg.seed)
    if probe > len(split.held_out):
        raise ValueError(f"--probe {probe} is more than the {len(split.held_out)} held-out domains")
    if probe_only:
        return _probe_taught(out, split, probe, cfg)
    if out.exists() and any(out.iterdir()) and not (out / "sft_run.json").is_file():
        raise FileExistsError(
            f"{out} is not empty and not an earlier SFT output; choose a new --out"
        )
    net, tokenizer = load_trainable(model)
    fmt = ChatFormat(tokenizer, "hermes")
    ends = end_tokens(tokenizer, getattr(net, "generation_config", None))
    examples = teacher_examples(split.train, cfg.seeds, fmt, ends, cfg.prompt)
    longest = max(len(e.token_ids) for e in examples)
    sft = SFTConfig(epochs=cfg.epochs, lr=cfg.lr, batch_tokens=max(cfg.batch_tokens, longest),
                    seed=cfg.seed, max_examples=cfg.max_examples)  # fmt: skip
    summary: dict[str, Any] = {
        "out": str(out), "model": model, "config": asdict(cfg),
        "train_domains": len(split.train), "held_out_domains": [n.domain for n in split.held_out],
        "examples": len(examples), "tokens": sum(len(e.token_ids) for e in examples),
        "policy_tokens": sum(e.policy_tokens for e in examples),
    }  # fmt: skip
    targets = split.held_out[:probe]
    if probe_base and probe:
        summary["base_probe"] = _probe(model, targets, cfg, "full")
    result = train_sft(net, examples, sft, on_step=on_step)
    summary.update(steps=len(result.steps), skipped_steps=result.skipped,
                   first_loss=result.steps[0].loss, last_loss=result.steps[-1].loss,
                   seconds=round(result.seconds, 1))  # fmt: skip
    save_policy(net, tokenizer, out, {"cold_start": "spec-writer", "spec_prompt": cfg.prompt,
                                      **summary, "training": result.to_dict()})  # fmt: skip
    del net
    if probe:
        summary["probe"] = _probe(str(out), targets, cfg, cfg.prompt)
    return summary


def _probe_taught(out: Path, split: Any, probe: int, cfg: SpecColdStartConfig) -> dict[str, Any]:
    """The probe of a folder taught by an earlier run, on that run's own held-out domains."""
    record = out / "sft_run.json"
    if not record.is_file():
        raise ValueError(f"--probe-only needs a folder taught by cold-start spec-writer: {out}")
    # The folder is the user's: a bounded read, and anything unexpected is refused by name.
    if record.is_symlink() or record.stat().st_size > 4 * 1024 * 1024:
        raise ValueError(f"{record} is a link or over 4 MiB: not an sft_run.json this writes")
    try:
        taught = json.loads(record.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{record} is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(taught, dict) or taught.get("cold_start") != "spec-writer":
        raise ValueError(f"{out} was not taught by cold-start spec-writer")
    held_out = taught.get("held_out_domains") or []
    if held_out[:probe] != [n.domain for n in split.held_out[:probe]]:
        raise ValueError(
            f"{out} was taught with another domain split: give the --held-out and --seed it "
            "was taught with"
        )
    from envgym.synth_agents.spec_agent import taught_prompt

    # Asked the way the spec agent asks this folder (its own reading of sft_run.json).
    probed = _probe(str(out), split.held_out[:probe], cfg, taught_prompt(str(out)))
    return {"out": str(out), "held_out_domains": held_out, "probe": probed}


def _probe(model: str, domains: Any, cfg: SpecColdStartConfig, prompt: str) -> dict[str, Any]:
    from envgym.models import load_policy

    policy = load_policy(model)
    try:
        return probe_specs(policy, domains, max_tokens=cfg.max_tokens, prompt=prompt)
    finally:
        asyncio.run(policy.aclose())
