"""The ``envgym`` command line (typer + rich)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envgym import registry
from envgym.bundle import Bundle, BundleError, load_bundle

app = typer.Typer(
    help="envgym: synthesized tool-use environments for agentic RL.", no_args_is_help=True
)
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

SandboxOpt = typer.Option(
    "bwrap", "--sandbox", help="bwrap | docker | inprocess (trusted bundles only)"
)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _safe(text: object) -> str:
    """Bundle text for the terminal: rich markup escaped ("[/x]" in a task id would raise
    MarkupError) and control characters shown as ``\\xNN`` (no escape sequences reach the tty)."""
    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)))


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {_safe(message)}")
    raise typer.Exit(2)


def _bundle_dir(target: str) -> Path:
    try:
        return registry.resolve_bundle(target)
    except (KeyError, ValueError) as exc:
        _fail(str(exc).strip('"'))
        raise  # unreachable


def _load(target: str) -> Bundle:
    """The bundle behind ``target``, or a clear error and exit 2 (a hostile bundle's sizes,
    nesting and encoding are BundleErrors; a bad $ENVGYM_BUNDLE_MAX_* is a ValueError)."""
    try:
        return load_bundle(_bundle_dir(target))
    except ValueError as exc:
        _fail(str(exc))
        raise  # unreachable


@app.command("list")
def list_envs() -> None:
    """List the registered environments."""
    table = Table(title="envgym environments")
    table.add_column("id", style="bold cyan")
    table.add_column("description")
    for s in registry.specs():
        table.add_row(s.id, s.description)
    console.print(table)


@app.command()
def show(
    target: str = typer.Argument(..., help="environment id or bundle directory"),
    sandbox: str = SandboxOpt,
) -> None:
    """Show an environment: manifest, tools and tasks."""
    from envgym.sandbox import open_sandbox

    bundle = _load(target)
    m = bundle.manifest
    console.print(f"[bold]{_safe(m.name)}[/] — {_safe(m.category)}\n{_safe(m.description)}")
    console.print(_safe(f"path: {bundle.root}\nhash: {m.content_hash}\nprovenance: {m.provenance}"))
    with open_sandbox(bundle.root, backend=sandbox) as box:
        tools = box.describe_tools()
    table = Table(title=f"{len(tools)} tools")
    table.add_column("tool", style="cyan")
    table.add_column("arguments")
    table.add_column("description")
    for t in tools:
        args = ", ".join(t.parameters.get("properties", {}))
        table.add_row(_safe(t.name), _safe(args), _safe(t.description.split("\n")[0]))
    console.print(table)
    tasks = Table(title=f"{len(bundle.tasks)} tasks")
    for col in ("id", "difficulty", "submit tool", "prompt"):
        tasks.add_column(col)
    for task in bundle.tasks:
        tasks.add_row(
            _safe(task.id),
            str(task.difficulty),
            _safe(task.submit_tool),
            _safe(task.prompt[:90]) + "…",
        )
    console.print(tasks)


@app.command()
def check(
    target: str = typer.Argument(..., help="environment id, bundle directory or suite"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    corruptions: int = typer.Option(20, help="single-field corruptions tried per task"),
    reruns: int = typer.Option(3, help="gold-solution reruns that must agree"),
    sandbox: str = SandboxOpt,
    mutation: bool = typer.Option(
        False, "--mutation", help="also run every mutant of the verifier (docs/CHECK.md)"
    ),
    max_mutants: int = typer.Option(
        0, help="with --mutation: a seeded sample of this many mutants (0: all)"
    ),
    sample: int = typer.Option(
        0, "--sample", help="a suite: check a seeded random sample of this many bundles (0: all)"
    ),
    seed: int = typer.Option(0, "--seed", help="a suite: the sample's (and mutants') seed"),
    baselines: list[str] | None = typer.Option(
        None, "--baseline", help="a suite: also run this solver of solution.py as a baseline"
    ),
) -> None:
    """Validate a bundle: gold passes, no-op fails, corruptions rejected, reruns agree."""
    from envgym.check import check_bundle
    from envgym.registry import check_handler
    from envgym.suite_manifest import is_suite

    if is_suite(target):  # docs/SUITES.md, "Checking a suite"
        from envgym.commands.check_suite import run_suite_check

        raise typer.Exit(
            run_suite_check(
                target,
                as_json=as_json,
                console=console,
                sample=sample,
                seed=seed,
                sandbox=sandbox,
                corruptions=corruptions,
                reruns=reruns,
                mutation=mutation,
                max_mutants=max_mutants,
                baselines=tuple(baselines or ()),
            )
        )

    if sample or baselines or seed:
        _fail(f"--sample, --seed and --baseline are for a suite; {target} is not one")
    # families whose tasks are not bundles check their own way (τ²: an oracle agent, docs/TAU2.md;
    # the MCP suite: gold MCP calls and verify.py, docs/MCP.md; ...): they register a handler
    handler = check_handler(target)
    if handler is not None:
        given = {"sandbox": sandbox, "reruns": reruns}
        raise typer.Exit(
            handler.run(
                target,
                as_json=as_json,
                console=console,
                **{k: v for k, v in given.items() if k in handler.options},
            )
        )
    bundle = _load(target)
    try:  # the check reads state/ into memory again: within the same limits, or a clear error
        report = check_bundle(
            bundle, sandbox=sandbox, corruptions_per_task=corruptions, reruns=reruns
        )
    except BundleError as exc:
        _fail(str(exc))
    mutated = None
    if mutation:
        from envgym.mutation_run import run_mutation, summary

        if max_mutants < 0:
            _fail(f"--max-mutants must be 0 (all) or more, got {max_mutants}")

        try:
            mutated = run_mutation(
                bundle,
                sandbox=sandbox,
                corruptions_per_task=corruptions,
                max_mutants=max_mutants or None,
            )
        except ValueError as exc:
            _fail(str(exc))
    if as_json:
        sys.stdout.write(
            json.dumps({**report.to_dict(), **({"mutation": mutated.to_dict()} if mutated else {})})
            + "\n"
        )
    else:
        print_check(report)
        if mutated is not None:
            console.print(summary(mutated), markup=False, highlight=False)
    raise typer.Exit(0 if report.passed and (mutated is None or mutated.passed) else 1)


def print_check(report: object) -> None:
    from envgym.check import CheckReport

    assert isinstance(report, CheckReport)
    table = Table(title=f"envgym check {report.bundle}")
    for col in (
        "task",
        "diff",
        "gold",
        "no-op rejected",
        "corruptions rejected",
        "reruns agree",
        "calls",
        "rules covered",
        "exploits rejected",
        "problems",
    ):
        table.add_column(col)
    mark = {True: "[green]✓[/]", False: "[red]✗[/]"}
    for t in report.tasks:
        table.add_row(
            _safe(t.task_id),
            str(t.difficulty),
            mark[t.gold_passed],
            mark[t.noop_rejected],
            f"{t.corruptions_rejected}/{t.corruptions_tried} ({t.rejection_rate:.0%})",
            mark[t.reruns_agree],
            str(t.tool_calls),
            f"{len(t.rules_covered)}/{len(t.rules)}",
            f"{t.exploits_tried - len(t.exploits_failed)}/{t.exploits_tried}",
            _safe("; ".join(t.problems)[:80]),
        )
    console.print(table)
    verdict = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
    console.print(
        f"{verdict}: {sum(t.passed for t in report.tasks)}/{len(report.tasks)} tasks pass"
    )


@app.command()
def play(
    target: str = typer.Argument(..., help="environment id or bundle directory"),
    task: str = typer.Option(None, help="task id (default: the first task)"),
    sandbox: str = SandboxOpt,
) -> None:
    """Play an episode by hand: call tools, then submit."""
    from envgym.play import play_episode

    try:
        env = registry.make(_bundle_dir(target), sandbox=sandbox)
    except BundleError as exc:
        _fail(str(exc))
    try:
        play_episode(env, task=task if task is not None else 0, console=console)
    finally:
        env.close()


@app.command()
def bench(
    name: str = typer.Argument("", help="benchmark name; none lists the benchmarks"),
    as_json: bool = typer.Option(False, "--json", help="print exactly one JSON object on stdout"),
    quick: bool = typer.Option(False, "--quick", help="a smaller run for smoke tests"),
) -> None:
    """Run a benchmark and its baselines in one process; print a table (or JSON)."""
    from envgym.bench import available, run_benchmark

    if not name:
        names = sorted(available())
        print(json.dumps({"benchmarks": names}) if as_json else "\n".join(names))
        return
    try:
        run_benchmark(name, as_json=as_json, quick=quick, console=console)
    except KeyError as exc:
        _fail(str(exc).strip('"'))


COMMANDS_GROUP = "envgym.commands"


def _register_commands() -> None:
    """Add every command declared in the ``envgym.commands`` entry-point group (pyproject.toml).

    Each is a ``register(app: typer.Typer) -> None``.  The core names none of them, so commands
    that drive other rooms (``synth``, ``train``, the demo: ``apps/``) live above the core and a
    third-party package adds commands by declaring an entry point.  A command that fails to load
    is reported and left out; the others still work.
    """
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name)
    if not found:  # metadata from an install that predates the group: say how to fix it
        err.print(
            f"[yellow]envgym: no {COMMANDS_GROUP} entry points are installed; "
            "run `pip install -e .` (scripts/setup.sh) to get the feature commands[/]"
        )
    for ep in found:
        try:
            ep.load()(app)
        except Exception as exc:  # one broken plugin must not take the whole CLI down
            err.print(f"[yellow]envgym: command {_safe(ep.name)} ({_safe(ep.value)}) not loaded: "
                      f"{_safe(exc)}[/]")  # fmt: skip


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
