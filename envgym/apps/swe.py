"""``envgym swe export|import``: SWE instances between our JSONL, SWE-bench JSONL and Harbor tasks.

    envgym swe export --format harbor INSTANCES.jsonl --out tasks/      # one task dir per instance
    envgym swe export --format swebench INSTANCES.jsonl --out out/      # out/instances.jsonl
    envgym swe import tasks/ --out instances.jsonl                      # Harbor dir(s) → JSONL
    envgym swe import tasks/t1 other.jsonl --out instances.jsonl        # several sources, merged

The formats and their decisions are envgym/envs/swe/interchange.py's (docs/SWE.md, "Instances,
mining and interchange"); this module only reads the command line and reports.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

app = typer.Typer(help="SWE instances: export to Harbor / SWE-bench, import from them (docs/SWE.md).",
                  no_args_is_help=True)  # fmt: skip
SWEBENCH_FILE = "instances.jsonl"


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="swe")


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", soft_wrap=True)
    raise typer.Exit(2)


@app.command("export")
def export_command(
    instances: Path = typer.Argument(..., help="instances JSONL (SWE-bench fields)"),
    out: Path = typer.Option(..., "--out", help="output directory"),
    fmt: str = typer.Option("harbor", "--format", help="harbor | swebench"),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="replace task directories that exist"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Write INSTANCES as Harbor task directories or a SWE-bench JSONL file under --out."""
    from envgym.envs.swe.instance import InstanceError
    from envgym.envs.swe.interchange import export_harbor, export_jsonl, import_jsonl

    if fmt not in ("harbor", "swebench"):
        _fail(f"--format must be 'harbor' or 'swebench', not {fmt!r}")
    try:
        read = import_jsonl(instances)
        if fmt == "harbor":
            # absolute: interchange runs `git archive -o PATH` in the source repository's folder
            written = [str(p) for p in export_harbor(read, out, overwrite=overwrite)]
        else:
            written = [str(export_jsonl(out / SWEBENCH_FILE, read))]
    except (
        InstanceError,
        FileExistsError,
        OSError,
        RuntimeError,
    ) as exc:  # RuntimeError: git (a snapshot)
        _fail(str(exc))
    _report({"format": fmt, "instances": len(read), "written": written}, as_json,
            f"exported {len(read)} instances as {fmt}: {out}")  # fmt: skip


@app.command("import")
def import_command(
    sources: list[Path] = typer.Argument(
        ..., help="Harbor task dirs, dirs of task dirs, or SWE-bench JSONL files"
    ),
    out: Path = typer.Option(..., "--out", help="the instances JSONL to write"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Read Harbor task directories and SWE-bench JSONL into one instances JSONL (ids must be unique)."""
    from envgym.envs.swe.instance import InstanceError
    from envgym.envs.swe.interchange import (
        export_jsonl,
        import_harbor,
        import_harbor_dir,
        import_jsonl,
    )

    read = []
    try:
        for source in sources:
            if source.is_dir():
                found = (
                    [import_harbor(source)]
                    if (source / "task.toml").is_file()
                    else import_harbor_dir(source)
                )
                if not found:
                    raise InstanceError(
                        "no task directory (with task.toml) here", where=str(source)
                    )
                read += found
            else:
                read += import_jsonl(source)
        export_jsonl(out, read)  # refuses ids seen twice across the sources
    except (InstanceError, OSError) as exc:
        _fail(str(exc))
    _report({"sources": [str(s) for s in sources], "instances": len(read), "out": str(out)}, as_json,
            f"imported {len(read)} instances into {out}")  # fmt: skip


def _report(payload: dict[str, object], as_json: bool, line: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        Console().print(line)
