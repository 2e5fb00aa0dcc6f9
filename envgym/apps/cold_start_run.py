"""``envgym cold-start search-qa``: teacher traces → SFT → a model folder the pipeline loads.

The traces (cold_start.py) are played through the real agent loop over the real search index,
so every tool result in an example is what the tools return; the examples train the model with
:func:`envgym.trainer.sft.train_sft` and the folder is written by
:func:`envgym.trainer.sft.save_policy`, so ``envgym synth search-qa --agent llm --model FOLDER``
loads it like any HF folder.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envgym.envs.search_qa.facts import Facts
from envgym.policy import SamplingParams
from envgym.synth_agents.search_qa.agent_loop import run_agent
from envgym.synth_agents.search_qa.cold_start import Played, Script, TeacherPolicy, scripts_for
from envgym.synth_agents.search_qa.model_pipeline import sample_entities
from envgym.tools.search import SearchTools
from envgym.tools.search.debian import Package


@dataclass(frozen=True)
class ColdStartConfig:
    entities: int = 200  # training entities sampled (those with a fitting chain give traces)
    hops: int = 2
    breadth: int = 3
    exclude_seed: int = 0  # the synthesis run's seed ...
    exclude_n: int = 50  # ... and how many of its entities are never trained on
    epochs: int = 2
    lr: float = 2e-4
    batch_tokens: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        if (
            min(self.entities, self.hops, self.breadth, self.epochs) < 1
            or self.exclude_n < 0
            or self.lr <= 0
        ):
            raise ValueError(
                "entities, hops, breadth and epochs must be >= 1, exclude_n >= 0 and lr > 0"
            )


def training_entities(packages: Sequence[Package], cfg: ColdStartConfig) -> list[str]:
    """``cfg.entities`` long-tail entities none of which a synthesis run with ``exclude_seed``
    and ``n <= exclude_n`` samples (sample_entities is prefix-stable in its seed)."""
    excluded = (
        set(sample_entities(packages, cfg.exclude_n, cfg.exclude_seed)) if cfg.exclude_n else set()
    )
    pool = sample_entities(packages, cfg.entities + len(excluded), cfg.seed + 1_000)
    return [e for e in pool if e not in excluded][: cfg.entities]


def example_from(played: Played, *, task_id: str) -> Any:
    """The SFT example of one played script: ids of the last turn, loss on every written span.
    Each prompt must extend the last (the local engine's token-in/token-out rule)."""
    from envgym.trainer.sft_data import SFTExample

    if len(played.turns) != len(played.steps):
        raise ValueError(
            f"{task_id}: the agent stopped after {len(played.turns)} of {len(played.steps)} steps"
        )
    ids: list[int] = []
    mask: list[int] = []
    for prompt, written in played.turns:
        if prompt[: len(ids)] != ids:
            raise ValueError(f"{task_id}: a prompt does not extend the previous turn")
        mask += [0] * (len(prompt) - len(ids)) + [1] * len(written)
        ids = [*prompt, *written]
    return SFTExample(tuple(ids), tuple(mask), "gold", "search-qa-cold-start", task_id)


def play(
    scripts: Sequence[Script],
    tools: SearchTools,
    fmt: Any,
    end_ids: frozenset[int],
    cfg: ColdStartConfig,
) -> list[Any]:
    """Every script through the real agent loop and tools; one example each."""
    teacher = TeacherPolicy(fmt, end_ids)
    params = SamplingParams(temperature=0.0, max_tokens=512)
    sessions = [f"{script.role}-{number:05d}" for number, script in enumerate(scripts)]

    async def main() -> None:
        for session, script in zip(sessions, scripts):
            teacher.begin(session, script.steps)
            turns = cfg.hops * (cfg.breadth + 1) if script.role == "construct" else 4
            await run_agent(teacher, tools, [dict(m) for m in script.messages], session=session,
                            params=params, max_tool_turns=turns)  # fmt: skip

    asyncio.run(main())
    return [
        example_from(teacher.finished[session], task_id=f"{session}:{script.entity}")
        for session, script in zip(sessions, scripts)
    ]


def probe_verifier(
    policy: Any, packages: Sequence[Package], tools: SearchTools, cfg: ColdStartConfig, pairs: int
) -> dict[str, Any]:
    """The taught verifier on held-out pairs: ``pairs`` entities from the excluded sample (never
    trained on), each checked once with its true answer and once with a sibling's value."""
    from envgym.synth_agents.search_qa import roles
    from envgym.synth_agents.search_qa.cold_start import construction_script, verification_script

    facts, rng = Facts.of(packages), random.Random(cfg.seed + 7)
    held_out = sample_entities(packages, max(cfg.exclude_n, 1), cfg.exclude_seed)
    tally: Counter[str] = Counter()

    async def main() -> None:
        done = 0
        for entity in held_out:
            if done == pairs:
                break
            kind = "person" if done % 2 == 0 else "version"
            made = construction_script(
                entity, facts, rng, hops=cfg.hops, breadth=cfg.breadth, kind=kind
            )
            if made is None:
                continue
            checks = [
                verification_script(made.pair, entity, facts, rng, correct=c) for c in (True, False)
            ]
            if None in checks:
                continue
            done += 1
            for truth, check in zip(("true", "false"), checks):
                messages = [dict(m) for m in check.messages]  # type: ignore[union-attr]
                run = await run_agent(
                    policy,
                    tools,
                    messages,
                    session=f"probe-{entity}-{truth}",
                    params=SamplingParams(temperature=0.0, max_tokens=160),
                    max_tool_turns=4,
                )
                said, _ = roles.read_verdict(run.text)
                tally[f"{truth}_{'accepted' if said else 'rejected'}"] += 1

    asyncio.run(main())
    right = tally["true_accepted"] + tally["false_rejected"]
    total = sum(tally.values())
    return {
        "pairs": total // 2,
        **dict(tally),
        "accuracy": round(right / total, 3) if total else None,
    }


def run_cold_start(
    out: Path,
    packages: Sequence[Package],
    tools: SearchTools,
    cfg: ColdStartConfig,
    *,
    model: str = "smollm2",
    probe: int = 0,
    on_step: Callable[[Any, int], None] | None = None,
) -> dict[str, Any]:
    """Traces → examples → SFT of ``model`` → ``out`` (an HF folder); returns the summary, with
    the taught verifier's held-out accuracy on ``probe`` pairs (:func:`probe_verifier`) if > 0."""
    from envgym.models.chat import ChatFormat, end_tokens
    from envgym.trainer.sft import SFTConfig, load_trainable, save_policy, train_sft

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "sft_run.json").is_file():
        raise FileExistsError(
            f"{out} is not empty and not an earlier SFT output; choose a new --out"
        )
    entities = training_entities(packages, cfg)
    scripts = scripts_for(
        entities, Facts.of(packages), hops=cfg.hops, breadth=cfg.breadth, seed=cfg.seed
    )
    if not scripts:
        raise ValueError(
            f"none of the {len(entities)} training entities has a {cfg.hops}-hop chain to ask about"
        )
    net, tokenizer = load_trainable(model)
    fmt = ChatFormat(tokenizer, "hermes")
    examples = play(
        scripts, tools, fmt, end_tokens(tokenizer, getattr(net, "generation_config", None)), cfg
    )
    sft = SFTConfig(epochs=cfg.epochs, lr=cfg.lr, batch_tokens=max(cfg.batch_tokens, max(len(e.token_ids)
                    for e in examples)), seed=cfg.seed)  # fmt: skip
    result = train_sft(net, examples, sft, on_step=on_step)
    roles_count = Counter(s.role for s in scripts)
    verdicts = Counter(
        json.loads(str(s.steps[-1]))["verdict"] for s in scripts if s.role == "verify"
    )
    summary = {
        "out": str(out), "model": model, "config": asdict(cfg),
        "entities": len(entities), "scripts": dict(roles_count), "verify_verdicts": dict(verdicts),
        "examples": len(examples), "tokens": sum(len(e.token_ids) for e in examples),
        "policy_tokens": sum(e.policy_tokens for e in examples),
        "steps": len(result.steps), "skipped_steps": result.skipped,
        "first_loss": result.steps[0].loss, "last_loss": result.steps[-1].loss,
        "seconds": round(result.seconds, 1),
    }  # fmt: skip
    save_policy(
        net, tokenizer, out, {"cold_start": "search-qa", **summary, "training": result.to_dict()}
    )
    if probe > 0:
        from envgym.models import load_policy

        policy = load_policy(str(out))
        try:
            summary["verifier_probe"] = probe_verifier(policy, packages, tools, cfg, probe)
        finally:
            asyncio.run(policy.aclose())
    return summary
