"""``envgym synth search-qa``: the search-QA branch of the synth command (envgym/apps/synth.py).

    envgym synth search-qa --n 50 --out out/sqa                                  # procedural, offline
    envgym synth search-qa --agent llm --model http://host:8000/v1 --n 20 --out out/sqa --hops 2
    envgym synth search-qa --agent llm --model smollm2 --n 2 --out out/sqa --max-tokens 64

Rerunning the same command into the same ``--out`` resumes a model run (its journal).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from envgym.progress import print_stages

NAMES = {"searchqa", "search", "searchagent", "websearch"}


def is_search_qa(category: str) -> bool:
    """``search-qa``, ``Search QA``, ``search_qa``, ``searchQA``…"""
    return isinstance(category, str) and re.sub(r"[\s_\-]+", "", category).lower() in NAMES


def search_qa_command(
    *,
    agent: str,
    model: str,
    n: int,
    out: Path,
    seed: int,
    hops: int,
    breadth: int,
    answer_models: str,
    max_tokens: int,
    temperature: float,
    sandbox: str,
    filter_k: int,
    as_json: bool,
) -> None:
    err = Console(stderr=True)
    try:
        payload = _run(agent, model, n, out, seed, hops, breadth, answer_models, max_tokens, temperature, sandbox,
                       filter_k)  # fmt: skip
    except (
        ValueError,
        RuntimeError,
        OSError,
    ) as exc:  # bad options, unloadable model, corpus, check failure
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    from envgym.synth_agents.search_qa.run import yield_rows

    console = print_stages(f"envgym synth · search qa · {payload['agent']}", yield_rows(payload))
    check = payload["check"]
    console.print(f"bundle: {payload['bundle'] or 'none (no pair kept)'}"
                  + (f"  ·  envgym check passed ({check['tasks']} tasks, {check['sandbox']})" if check else "")
                  + f"  ·  {payload['seconds']:.1f} s")  # fmt: skip


def _run(
    agent: str,
    model: str,
    n: int,
    out: Path,
    seed: int,
    hops: int,
    breadth: int,
    answer_models: str,
    max_tokens: int,
    temperature: float,
    sandbox: str,
    filter_k: int,
) -> dict[str, Any]:
    from envgym.synth_agents.search_qa.model_pipeline import SynthConfig
    from envgym.synth_agents.search_qa.run import synthesize_procedural, synthesize_with_models
    from envgym.tools.search.debian import load_packages

    if filter_k:
        raise ValueError("--filter-k does not apply to search-qa: its answer agents are the filter")
    if agent not in ("procedural", "llm"):
        raise ValueError(f"--agent must be 'procedural' or 'llm', not {agent!r}")
    check = None if sandbox == "none" else sandbox
    if agent == "procedural":
        if n < 1 or hops < 1:
            raise ValueError("--n and --hops must be >= 1")
        return synthesize_procedural(out, load_packages(), n=n, seed=seed, hops=hops, check=check)
    config = SynthConfig(n=n, seed=seed, hops=hops, breadth=breadth, constructor=model,
                         answer_models=tuple(m.strip() for m in answer_models.split(",") if m.strip()),
                         max_tokens=max_tokens, temperature=temperature)  # fmt: skip
    from envgym.tools.search import SearchTools
    from envgym.tools.search.build import default_index

    return synthesize_with_models(
        out, load_packages(), SearchTools(default_index()), config, check=check
    )
