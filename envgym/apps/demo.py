"""``envgym demo``, the README demo: the mission in miniature (``demo_suite.py``) — synthesize a
small suite of environments offline, check it, cold-start the embedded model on its training
categories, filter their tasks by pass@k with that policy, train a few GRPO steps on what the
filter kept, and measure pass@1 on categories never trained on — then mine and check SWE
instances from a small repository's history (``demo_swe.py``).

It drives the synthesis, SWE and trainer rooms, so it lives in ``apps/`` (above the core) and
reaches the CLI through the ``envgym.commands`` entry point.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import typer
from rich.console import Console


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)


def demo_command(
    sandbox: str = typer.Option(
        "bwrap", "--sandbox", help="bwrap | docker | inprocess (trusted bundles only)"
    ),
    quick: bool = typer.Option(
        False, "--quick", help="every step at its smallest size: the same paths in a few minutes"
    ),
    swe: bool = typer.Option(
        True,
        "--swe/--no-swe",
        help="end by mining, validating and checking SWE instances from a small repository",
    ),
) -> None:
    """The README demo: synthesize → check → cold start → filter → train → held-out evaluation,
    then SWE instances from a repository's history."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    raise typer.Exit(run_demo(console=console, sandbox=sandbox, quick=quick, swe=swe))


def run_demo(
    *, console: Console, sandbox: str = "bwrap", quick: bool = False, swe: bool = True
) -> int:
    """A process exit code: 0 when every step ran and its checks held (the held-out pass
    rates are reported, not judged).

    ``quick``: every step at its smallest size — the same code paths in a few minutes; the test
    suite runs the demo this way.
    """
    from envgym.apps.demo_suite import DemoStory, demo_story

    t0 = time.perf_counter()
    out = _demo_dir()
    spec = DemoStory.quick() if quick else DemoStory()
    ok = demo_story(console, out / "story", sandbox, spec=spec)
    if swe:
        from envgym.apps.demo_swe import demo_swe

        t = time.perf_counter()
        ok = demo_swe(console, out, sandbox, step=7, quick=quick) and ok
        console.print(f"  (step took {time.perf_counter() - t:.0f} s)")
    console.print(
        f"[bold]{'demo OK' if ok else 'demo FAILED'}[/] in {time.perf_counter() - t0:.1f} s"
    )
    return 0 if ok else 1


def _demo_dir() -> Path:
    return Path(os.environ.get("ENVGYM_DEMO_DIR", Path.home() / ".cache" / "envgym" / "demo"))
