"""``envgym export``: envgym tasks and trajectories in other projects' formats.

    envgym export harbor trip-planning-v0 --out tasks/          # one Harbor task per bundle task
    envgym export harbor path/to/bundle --out tasks/ --task t1  # only these tasks
    envgym export harbor instances.jsonl --out tasks/           # SWE instances (envgym/envs/swe)
    envgym export trajectories --format atif --out runs/        # every stored episode, ATIF
    envgym export trajectories --format atif --eval 3f2a --out t.jsonl   # one eval run

The formats and their decisions are envgym/envs/harbor_export's (tasks) and envgym/store/atif.py's
(trajectories), docs/HARBOR.md; this module reads the command line and reports.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(help="Export tasks (Harbor) and trajectories (ATIF, JSONL, Parquet).",
                  no_args_is_help=True)  # fmt: skip
TRAJECTORY_FORMATS = ("atif", "jsonl", "parquet")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="export")


def _fail(message: str) -> None:
    # the message may hold "[...]" from a task's text: escaped, never read as markup
    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)


def _report(payload: dict[str, object], as_json: bool, line: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        Console().print(line, markup=False)


@app.command("harbor")
def harbor_command(
    target: str = typer.Argument(
        ..., help="environment id, bundle directory, or SWE instances JSONL"
    ),
    out: Path = typer.Option(..., "--out", help="directory to write the task directories into"),
    tasks: list[str] = typer.Option(None, "--task", help="only this task id (repeatable)"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace task dirs that exist"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Write TARGET's tasks as Harbor task directories (task.toml, instruction.md, environment/,
    solution/solve.sh, tests/test.sh) under --out."""
    from envgym.bundle import BundleError
    from envgym.envs.harbor_export.families import NotExportable, export_target
    from envgym.envs.harbor_export.quoting import QuotingError
    from envgym.envs.swe.instance import InstanceError

    try:
        written = export_target(target, out, overwrite=overwrite, task_ids=tasks or None)
    except NotExportable as exc:
        _fail(f"cannot export to Harbor: {exc}")
    except (BundleError, InstanceError, QuotingError, FileExistsError, OSError) as exc:
        _fail(str(exc))
    except (KeyError, ValueError, RuntimeError) as exc:  # no such env; not a bundle; git
        _fail(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))
    paths = [str(p) for p in written]
    _report({"target": target, "tasks": len(paths), "written": paths}, as_json,
            f"exported {len(paths)} Harbor tasks: {out}")  # fmt: skip


@app.command("trajectories")
def trajectories_command(
    out: Path = typer.Option(
        ..., "--out", help="atif: a .jsonl file or a directory of .json files; else the file"
    ),
    fmt: str = typer.Option("atif", "--format", help="atif | jsonl | parquet"),
    evaluation: str = typer.Option(
        None, "--eval", help="one evaluation run: its key or a unique prefix (default: all)"
    ),
    db: str = typer.Option(None, "--db", help="store URL (default $ENVGYM_DB or the local file)"),
    token_ids: bool = typer.Option(
        True, "--token-ids/--no-token-ids", help="atif: per-step prompt and completion token ids"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Write stored episodes (of one --eval run, or all) as ATIF trajectories, JSONL or Parquet."""
    from envgym.store import Store, StoreError
    from envgym.store.atif import write_trajectories

    if fmt not in TRAJECTORY_FORMATS:
        _fail(f"--format must be one of {', '.join(TRAJECTORY_FORMATS)}, not {fmt!r}")
    try:
        with Store(db) as store:
            runs = store.evaluations()
            if evaluation is not None:
                runs = [r for r in runs if r.key.startswith(evaluation)]
                if len(runs) != 1:
                    why = "no evaluation" if not runs else f"{len(runs)} evaluations"
                    _fail(f"--eval {evaluation!r}: {why} in the store start with it")
            if fmt != "atif":
                key = runs[0].key if evaluation is not None else None
                count = store.export(out, key=key, fmt=fmt)
            else:
                rows = ((r.key, r.model, e) for r in runs for e in store.episodes(r.key))
                count = write_trajectories(out, rows, token_ids=token_ids)
    except (StoreError, OSError, ValueError) as exc:
        _fail(str(exc))
    _report({"format": fmt, "episodes": count, "out": str(out)}, as_json,
            f"exported {count} episodes as {fmt}: {out}")  # fmt: skip
