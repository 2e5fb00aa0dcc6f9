"""Which envgym target exports to Harbor how, and which cannot (with the reason).

* a bundle directory or a bundle-backed env id (trip planning, retail orders, meeting
  scheduling, shipment logistics, spec-compiled categories, code interpreter, search QA):
  `bundle_task.export_bundle`, one task directory per bundle task;
* a SWE instances JSONL file: the SWE family's own export (envgym/envs/swe/interchange.py);
* τ² and the MCP suite: refused with `NotExportable`, which says why (docs/HARBOR.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from envgym.envs.harbor_export.bundle_task import HarborTaskOptions, export_bundle

__all__ = ["NotExportable", "export_target", "refusal"]

TAU2 = (
    "τ²-bench tasks are conversations: a simulated user (a language model following the task's "
    "user scenario) answers the agent turn by turn, and the grade reads that conversation as "
    "well as the final database. A Harbor task gives the agent one instruction and no one to "
    "talk to, so the user's side cannot be expressed; run τ² with `envgym eval tau2-…`."
)
MCP = (
    "MCP-suite tasks are done through MCP servers (the filesystem server from npm, git and SQLite "
    "servers from PyPI) on the episode's state, and their gold solution is a plan of MCP calls. "
    "Harbor can declare stdio MCP servers for the agent, but a faithful export also needs those "
    "servers installed in the image and an MCP client in it that replays the gold plan for the "
    "oracle; envgym does not write that yet, so these tasks are refused rather than exported "
    "without a working oracle."
)
SWE = (
    "SWE instances are exported from their instances JSONL: `envgym export harbor "
    "INSTANCES.jsonl --out DIR` (or `envgym swe export --format harbor`)."
)


class NotExportable(ValueError):
    """A target whose tasks Harbor's format cannot express (the message says why)."""


def refusal(target: str, category: str | None = None) -> str | None:
    """Why `target` (an env id, or a bundle of `category`) cannot be exported; None if it can."""
    name = target.strip().lower()
    if category == "tau2-bench" or name.startswith("tau2"):
        return TAU2
    if category == "mcp" or name.startswith("mcp-suite"):
        return MCP
    if name.startswith("swe"):
        return SWE
    return None


def export_target(
    target: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    options: HarborTaskOptions | None = None,
    overwrite: bool = False,
    task_ids: list[str] | None = None,
) -> list[Path]:
    """Export `target` (bundle dir, env id or SWE instances JSONL) as Harbor tasks under `out_dir`
    (only `task_ids`' tasks when given)."""
    path = Path(target)
    if path.is_file() and path.suffix == ".jsonl":
        from envgym.envs.swe.interchange import export_harbor, import_jsonl

        instances = import_jsonl(path)
        if task_ids is not None:
            instances = [i for i in instances if i.instance_id in set(task_ids)]
        return export_harbor(instances, out_dir, overwrite=overwrite)
    if (path / "manifest.json").is_file():
        from envgym.bundle import load_bundle

        why = refusal("", load_bundle(path).manifest.category)
        if why:
            raise NotExportable(f"{path}: {why}")
        return export_bundle(path, out_dir, options=options, overwrite=overwrite, task_ids=task_ids)
    why = refusal(str(target))
    if why:
        raise NotExportable(f"{target}: {why}")
    from envgym.registry import resolve_bundle

    bundle_dir = resolve_bundle(str(target))  # KeyError: no such env; ValueError: not a bundle
    return export_bundle(
        bundle_dir, out_dir, options=options, overwrite=overwrite, task_ids=task_ids
    )
