"""``envgym synth CATEGORY --n N --out DIR``: synthesize, validate, filter; resumable.

    envgym synth "trip planning" --n 50 --out out/trip                 # procedural
    envgym synth "retail orders" --n 20 --out out/retail --filter-k 100 --filter-model gold
    envgym synth "library loans" --n 5 --out out/lib --agent llm --model smollm2
    envgym synth search-qa --n 50 --out out/sqa [--agent llm --model URL --hops 2 --breadth 3]
    envgym synth swe --repo PATH_OR_URL --out out/swe [--max-candidates 20 --repeats 2 --judge-model URL#model]
    envgym synth --categories cats.txt|all --per-category 10 --out out/suite [--held-out-share 0.2]

docs/SYNTHESIS.md describes the agents, docs/SUITES.md the suites, the validation and the filter; docs/SWE.md the swe branch.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from envgym.progress import progress_bar


def register(app: typer.Typer) -> None:
    app.command("synth")(synth_command)


def synth_command(
    category: str = typer.Argument(
        None, help="task category, e.g. 'trip planning' (matched leniently)"
    ),
    categories: str = typer.Option(
        None,
        "--categories",
        help="build a suite: a file of category names (one a line, # comments), 'all', or 'specs' (every spec-compiled category)",
    ),
    per_category: int = typer.Option(
        None, "--per-category", help="suite: validated-bundle jobs per category"
    ),
    held_out_share: float = typer.Option(
        0.2, "--held-out-share", help="suite: share of categories held out (seeded)"
    ),
    validation_share: float = typer.Option(
        0.0,
        "--validation-share",
        help="suite: share of categories for validation (choices made during training; seeded)",
    ),
    n: int = typer.Option(10, "--n", help="bundles to synthesize (job i uses seed S + i)"),
    out: Path = typer.Option(
        None,
        "--out",
        help="output directory (bundles/, rejected/, synth.jsonl); required except for swe",
    ),
    agent: str = typer.Option("procedural", "--agent", help="procedural | llm"),
    mode: str = typer.Option(
        "spec",
        "--mode",
        help="LLM agent: spec (the model writes a declarative spec, the compiler the rest) | "
        "code (the model writes tools, solution and verifier)",
    ),
    model: str = typer.Option(
        "smollm2",
        "--model",
        help="LLM agent's model: smollm2 | HF dir | http(s)://server/v1[#model] | "
        "vllm+http(s)://server/v1[#model] (docs/MODELS.md)",
    ),
    seed: int = typer.Option(0, "--seed", help="base seed"),
    tasks_per_bundle: int = typer.Option(
        3, "--tasks-per-bundle", help="procedural: tasks in each bundle"
    ),
    difficulties: str = typer.Option(
        "1,2,3,4,5", "--difficulties", help="procedural: difficulty cycle, e.g. 3,4,5"
    ),
    max_rows: int = typer.Option(
        None,
        "--max-rows",
        help="procedural, spec-compiled categories: cap every table (≥ 8; shorter tool results)",
    ),
    workers: int = typer.Option(
        min(2, os.cpu_count() or 1), "--workers", help="procedural: worker processes"
    ),
    filter_k: int = typer.Option(0, "--filter-k", help="pass@k filter with this k (0: no filter)"),
    filter_model: str = typer.Option(
        "smollm2",
        "--filter-model",
        help="policy the filter samples: smollm2 | HF dir | http(s)://… | vllm+http(s)://… | "
        "gold | random (docs/MODELS.md)",
    ),
    drop_always_solved: bool = typer.Option(
        False, "--drop-always-solved", help="also drop tasks the filter policy always solves"
    ),
    filter_concurrency: int = typer.Option(
        4, "--filter-concurrency", help="episodes in flight while filtering"
    ),
    filter_max_turns: int = typer.Option(
        0,
        "--filter-max-turns",
        help="filter: assistant turns per episode "
        "(0: derived from the gold solution's length, at least 128)",
    ),
    filter_episode_tokens: int = typer.Option(
        0,
        "--filter-episode-tokens",
        help="filter: sampled tokens per "
        "episode (0: derived from the gold solution's length, at least 8192)",
    ),
    filter_max_tokens: int = typer.Option(
        512, "--filter-max-tokens", help="filter: sampled tokens per turn"
    ),
    max_rounds: int = typer.Option(3, "--max-rounds", help="LLM agent: revisions per stage"),
    max_levels: int = typer.Option(
        2, "--max-levels", help="LLM agent: difficulty raises after the first task"
    ),
    max_tokens: int = typer.Option(
        1024, "--max-tokens", help="LLM agent: tokens per model reply (spec mode: at least 4096)"
    ),
    temperature: float = typer.Option(0.7, "--temperature", help="LLM agent: sampling temperature"),
    sandbox: str = typer.Option(
        "bwrap", "--sandbox", help="bwrap | docker (inprocess skips the isolation check)"
    ),
    db: str = typer.Option(
        None,
        "--db",
        help="SQLAlchemy URL of the store (default $ENVGYM_DB or ~/.cache/envgym/envgym.db)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print exactly one JSON object on stdout"),
    hops: int = typer.Option(2, "--hops", help="search-qa: depth (documents a question needs)"),
    breadth: int = typer.Option(
        3, "--breadth", help="search-qa: searches per hop of the question agent"
    ),
    answer_models: str = typer.Option(
        "",
        "--answer-models",
        help="search-qa: comma-separated answer-agent models (default: --model)",
    ),
    repo: str = typer.Option(
        None, "--repo", help="swe: the repository to mine (path or clone URL)"
    ),
    max_candidates: int = typer.Option(
        20, "--max-candidates", help="swe: mined candidates to validate"
    ),
    repeats: int = typer.Option(
        2, "--repeats", help="swe: test runs per side (flaky tests excluded)"
    ),
    judge_model: str = typer.Option(
        "", "--judge-model", help="swe: URL#model of a judge for problem statements"
    ),
) -> None:
    """Synthesize validated <environment, tools, task, verifier> bundles for a category."""
    from envgym.synth_agents.search_qa.cli import is_search_qa, search_qa_command

    if categories is not None or per_category is not None:  # a suite (docs/SUITES.md)
        from envgym.apps.synth_suite import suite_command

        return suite_command(
            category=category,
            categories=categories,
            per_category=per_category,
            out=out,
            held_out_share=held_out_share,
            validation_share=validation_share,
            seed=seed,
            workers=workers,
            tasks_per_bundle=tasks_per_bundle,
            difficulties=difficulties,
            max_rows=max_rows,
            agent=agent,
            sandbox=sandbox,
            db=db,
            as_json=as_json,
        )
    if category is None:
        Console(stderr=True).print(
            "[bold red]error:[/] name a CATEGORY, or build a suite with --categories FILE|all"
        )
        raise typer.Exit(2)
    from envgym.synth_agents.swe.cli import is_swe, swe_command

    if is_swe(
        category
    ):  # mined from a repository's history and validated by its tests (docs/SWE.md)
        return swe_command(
            repo=repo,
            out=out,
            max_candidates=max_candidates,
            repeats=repeats,
            sandbox=sandbox,
            judge_model=judge_model,
            as_json=as_json,
        )
    if out is None:
        Console(stderr=True).print("[bold red]error:[/] --out is required")
        raise typer.Exit(2)
    if is_search_qa(
        category
    ):  # its own pipeline (docs/SEARCH_QA.md): QA pairs, not bundles per job
        return search_qa_command(
            agent=agent,
            model=model,
            n=n,
            out=out,
            seed=seed,
            hops=hops,
            breadth=breadth,
            answer_models=answer_models,
            max_tokens=max_tokens,
            temperature=temperature,
            sandbox=sandbox,
            filter_k=filter_k,
            as_json=as_json,
        )
    err = Console(stderr=True)
    console = Console(width=None if sys.stdout.isatty() else 160)
    try:
        synth_agent, workers, mutation = _agent(
            agent,
            mode,
            category,
            model,
            tasks_per_bundle,
            difficulties,
            max_rows,
            workers,
            (max_rounds, max_levels, max_tokens, temperature, seed),
            sandbox,
        )
        from envgym.store import Store

        store = Store(db)
    except (
        ValueError,
        RuntimeError,
    ) as exc:  # UnknownCategory, ModelSpecError, StoreError are among these
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    from envgym.policy import SamplingParams
    from envgym.rollout import RolloutBudget
    from envgym.synth_agents.passk import FilterConfig
    from envgym.synth_agents.pipeline import ValidationSettings, run_synthesis
    from envgym.synth_agents.recorder import SynthRecorder

    try:
        recorder = SynthRecorder(out, store)
        with progress_bar(err) as bar:
            job_bar = bar.add_task(f"synth {synth_agent.category} · {synth_agent.name}", total=n)
            summary = run_synthesis(
                synth_agent,
                n=n,
                seed=seed,
                recorder=recorder,
                workers=workers,
                settings=ValidationSettings(sandbox=sandbox, mutation=mutation),
                progress=lambda done, total, record: bar.update(
                    job_bar, completed=done, total=total
                ),
            )
            filtered = None
            if filter_k > 0:
                if filter_max_turns < 0 or filter_episode_tokens < 0:
                    raise ValueError(
                        "--filter-max-turns and --filter-episode-tokens must be ≥ 0 (0: derived)"
                    )
                # Given explicitly, the budget is fixed; left at 0, it is derived per bundle from
                # its longest gold solution (FilterConfig.budget_for) with the defaults as floors.
                derive = not (filter_max_turns and filter_episode_tokens)
                budget = RolloutBudget(
                    max_turns=filter_max_turns or RolloutBudget().max_turns,
                    max_tokens=filter_episode_tokens or RolloutBudget().max_tokens,
                )
                config = FilterConfig(
                    k=filter_k,
                    drop_always_solved=drop_always_solved,
                    concurrency=filter_concurrency,
                    sandbox=sandbox,
                    budget=budget,
                    seed=seed,
                    derive_budget=derive,
                    params=SamplingParams(temperature=0.7, max_tokens=filter_max_tokens),
                )
                filtered = _filter(recorder, synth_agent, n, seed, filter_model, config, bar)
    except (ValueError, RuntimeError) as exc:
        err.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    finally:
        store.close()
        if hasattr(synth_agent, "close"):  # the LLM agent holds a model and an event loop
            synth_agent.close()
    payload: dict[str, Any] = {
        "synthesis": summary.to_dict(),
        "filter": filtered.to_dict() if filtered else None,
        "out": str(out),
        "store": store.url,
    }
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        print_summary(payload, console)


def _levels(difficulties: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in difficulties.split(",") if x.strip())
    except ValueError:
        raise ValueError(
            f"--difficulties must be comma-separated integers 1..5, not {difficulties!r}"
        ) from None


def _agent(
    kind: str,
    mode: str,
    category: str,
    model: str,
    tasks: int,
    difficulties: str,
    max_rows: int | None,
    workers: int,
    llm: tuple[int, int, int, float, int],
    sandbox: str,
) -> tuple[Any, int, bool | None]:
    """The synthesis agent, its worker count, and whether validation mutates its verifier
    (None: validation decides — on for a machine-written verifier)."""
    if kind == "procedural":
        from envgym.synth_agents.procedural import ProceduralAgent

        agent = ProceduralAgent(
            category, tasks_per_bundle=tasks, difficulties=_levels(difficulties), max_rows=max_rows
        )
        return agent, workers, None
    if max_rows is not None:
        raise ValueError("--max-rows is for the procedural agent")
    if kind == "llm" and mode == "spec":
        from envgym.synth_agents.spec_agent import make_spec_agent

        rounds, _, tokens, temperature, seed = llm
        spec_agent = make_spec_agent(
            category,
            model,
            max_rounds=rounds,
            max_tokens=max(tokens, 4096),  # a spec is a few thousand tokens of JSON
            temperature=temperature,
            seed=seed,
            tasks_per_bundle=tasks,
            difficulties=_levels(difficulties),
        )
        # Every compiled bundle ships the same reviewed verifier (mutation measured once in
        # docs/ENV_SPEC.md): the model wrote data, not verifier code.
        return spec_agent, 1, False
    if kind == "llm" and mode == "code":
        from envgym.policy import SamplingParams
        from envgym.synth_agents.llm_agent import LLMAgent, LLMConfig

        rounds, levels, tokens, temperature, seed = llm
        params = SamplingParams(temperature=temperature, max_tokens=tokens, seed=seed)
        config = LLMConfig(max_rounds=rounds, max_levels=levels, sandbox=sandbox, params=params)
        return LLMAgent.from_model(category, model, config), 1, None
    if kind == "llm":
        raise ValueError(f"--mode must be 'spec' or 'code', not {mode!r}")
    raise ValueError(f"--agent must be 'procedural' or 'llm', not {kind!r}")


def _filter(
    recorder: Any, synth_agent: Any, n: int, seed: int, model: str, config: Any, bar: Progress
) -> Any:
    from envgym.synth_agents.filter_run import filter_run, model_policy_factory
    from envgym.synth_agents.pipeline import jobs_for

    records = [recorder.job(j.key) or {} for j in jobs_for(synth_agent, n, seed)]
    task = bar.add_task(f"pass@{config.k} filter · {model}", total=None)
    return filter_run(
        recorder,
        records,
        model=model,
        factory=model_policy_factory(model, config.sandbox),
        config=config,
        progress=lambda done, total: bar.update(task, completed=done, total=total),
    )


def print_summary(payload: dict[str, Any], console: Console) -> None:
    s, f = payload["synthesis"], payload["filter"]
    table = Table(title=f"envgym synth · {s['category']} · {s['agent']}")
    for col in ("", "bundles", "note"):
        table.add_column(col)
    table.add_row("requested", str(s["requested"]), f"{s['resumed']} already done before this run")
    table.add_row("made", str(s["made"]), "the agent produced a bundle")
    table.add_row(
        "validated",
        str(s["validated"]),
        f"{s['kept_tasks']} tasks; {s['dropped_duplicates']} near-duplicate tasks dropped",
    )
    for reason, count in sorted(s["rejected"].items(), key=lambda kv: -kv[1]):
        table.add_row(f"rejected: {reason}", str(count), "")
    if f is not None:
        table.add_row(
            f"kept by pass@{f['k']}",
            f"{f['kept']}/{f['tasks']} tasks",
            ", ".join(f"{k}: {v}" for k, v in sorted(f["decisions"].items())),
        )
        by = f.get("by_declared_difficulty") or {}
        if by:
            table.add_row(
                "pass rate by difficulty label",
                ", ".join(f"{k}: {v['pass_rate']:.0%} of {v['tasks']}" for k, v in by.items()),
                "measured difficulty = 1 − pass rate (a label is only a claim)",
            )
        table.add_row(
            "filter budget",
            f"≤ {f['max_turns']} turns, ≤ {f['max_tokens']} tokens",
            f"{f['budget_rule']}; longest gold: {f['longest_gold_calls']} calls",
        )
        table.add_row(
            "filter tokens",
            f"{f['tokens']}",
            f"{f['token_fraction']:.1%} of ~{f['full_tokens_estimate']} for "
            f"{f['k']} full rollouts per task",
        )
    console.print(table)
    console.print(f"out: {payload['out']}  ·  store: {payload['store']}  ·  {s['seconds']:.1f} s")
