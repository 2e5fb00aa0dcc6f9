"""Running search-QA synthesis end to end: models in, a checked bundle and its yields out.

``envgym synth search-qa`` lands here (envgym/apps/synth.py): ``--agent procedural`` (the
default, offline) writes procedural questions; ``--agent llm`` runs the model pipeline
(model_pipeline.py) with any OpenAI-compatible server or the embedded model.  Either way the
bundle is written to ``OUT/bundle`` and must pass the adversarial ``envgym check`` before it
is reported as made; the yields are written to ``OUT/synth_search_qa.json``, into the bundle's
manifest provenance, and printed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envgym.policy import Policy
from envgym.synth_agents.search_qa.model_pipeline import SynthConfig, Synthesis
from envgym.tools.search import SearchTools
from envgym.tools.search.debian import Package

SUMMARY = "synth_search_qa.json"


def _load(spec: str) -> Policy:
    from envgym.evaluate.models import load_language_model

    return load_language_model(spec, "write or answer search questions")


def _replace_bundle(out: Path, write: Any) -> Path:
    """Write the bundle into a scratch folder, then swap it in: a rerun rewrites it whole."""
    scratch, final = out / ".bundle.partial", out / "bundle"
    shutil.rmtree(scratch, ignore_errors=True)
    write(scratch)
    shutil.rmtree(final, ignore_errors=True)
    scratch.rename(final)
    return final


def _check(bundle: Path, sandbox: str) -> dict[str, Any]:
    from envgym.bundle import load_bundle
    from envgym.check import check_bundle

    report = check_bundle(load_bundle(bundle), sandbox=sandbox, corruptions_per_task=10, reruns=2)
    failed = [t.task_id for t in report.tasks if not t.passed]
    if not report.passed:
        raise RuntimeError(
            f"the synthesized bundle {bundle} fails envgym check on tasks {failed[:5]}"
        )
    return {"passed": True, "tasks": len(report.tasks), "sandbox": sandbox}


def synthesize_with_models(
    out: Path,
    packages: Sequence[Package],
    tools: SearchTools,
    config: SynthConfig,
    *,
    policies: dict[str, Policy] | None = None,
    check: str | None = "bwrap",
) -> dict[str, Any]:
    """Run (or resume) the model pipeline into ``out``; ``policies`` given are used, not closed."""
    from envgym.envs.search_qa.build import write_bundle

    out = Path(out)
    given = dict(policies or {})
    needed = {config.constructor, config.verifier_model, *(a.model for a in config.agents())}
    loaded = {spec: _load(spec) for spec in sorted(needed - set(given))}
    synthesis = Synthesis(out, packages, tools, config, {**given, **loaded})
    started = time.perf_counter()

    async def main() -> dict[str, Any]:
        try:
            return await synthesis.run()
        finally:
            for policy in loaded.values():
                await policy.aclose()

    yields = asyncio.run(main())
    kept = synthesis.kept()
    models = {
        "constructor": config.constructor,
        "verifier": config.verifier_model,
        "answer": sorted({a.model for a in config.agents()}),
    }
    payload: dict[str, Any] = {"agent": "model", "models": models, "config": config.identity() | {"n": config.n},
                               "yield": yields, "seconds": round(time.perf_counter() - started, 2),
                               "bundle": None, "check": None}  # fmt: skip
    if kept:
        provenance = {
            "agent": "model:search_qa",
            "model": config.constructor,
            "seed": config.seed,
            "yield": yields,
        }
        pairs, wrong = [p for p, _ in kept], [w for _, w in kept]
        bundle = _replace_bundle(
            out,
            lambda d: write_bundle(
                d, pairs, packages, seed=config.seed, provenance=provenance, wrong=wrong
            ),
        )
        payload["bundle"] = str(bundle)
        if check:
            payload["check"] = _check(bundle, check)
    (out / SUMMARY).write_text(json.dumps(payload, indent=2) + "\n")
    return payload


def synthesize_procedural(
    out: Path,
    packages: Sequence[Package],
    *,
    n: int,
    seed: int,
    hops: int,
    check: str | None = "bwrap",
) -> dict[str, Any]:
    from envgym.envs.search_qa.build import build_bundle

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bundle = _replace_bundle(
        out, lambda d: build_bundle(d, packages, n=n, seed=seed, max_hops=hops)
    )
    kept = sum(1 for _ in (bundle / "tasks.jsonl").open())
    payload: dict[str, Any] = {"agent": "procedural", "config": {"n": n, "seed": seed, "hops": hops},
                               "yield": {"explored": n, "kept": kept}, "bundle": str(bundle), "check": None,
                               "seconds": round(time.perf_counter() - started, 2)}  # fmt: skip
    if check:
        payload["check"] = _check(bundle, check)
    (out / SUMMARY).write_text(json.dumps(payload, indent=2) + "\n")
    return payload


def yield_rows(payload: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Rows for the printed table: (stage, count, note)."""
    y = payload["yield"]
    if payload["agent"] == "procedural":
        return [
            (
                "questions",
                str(y["kept"]),
                f"of {y['explored']} asked; answers known by construction",
            )
        ]
    f = y["fraction"]

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{x:.0%}"

    rate = y["kept_per_model_hour"]
    return [
        ("entities explored", str(y["explored"]), "long-tail sample"),
        (
            "constructed",
            str(y["constructed"]),
            f"{pct(f['constructed'])} of explored (grounded in the corpus)",
        ),
        ("verified", str(y["verified"]), f"{pct(f['verified'])} of constructed"),
        (
            "kept: all candidates failed",
            str(y["kept"]),
            f"{pct(f['kept'])} of verified; {pct(f['overall'])} overall",
        ),
        (
            "dropped at",
            ", ".join(f"{k}: {v}" for k, v in sorted(y["dropped_at"].items())) or "—",
            "",
        ),
        (
            "model time",
            f"{y['model_s']:.1f} s",
            f"{y['completion_tokens']} tokens; by role {y['model_s_by_role']}",
        ),
        ("kept pairs per model hour", "—" if rate is None else f"{rate:.1f}", ""),
    ]
