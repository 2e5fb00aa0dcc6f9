"""The descriptor bundle of a Harbor task or dataset: what ``envgym eval`` keys and lists.

``envgym eval`` stores evaluations by a bundle (its task ids and content hash), so ``harbor:PATH``
gets a small bundle: one ``tasks.jsonl`` line per task and ``state/harbor_tasks.json`` with a
digest of every file each task holds, so any change to a task is a new content hash.  Episodes
run in ``HarborEnv``, never over this bundle.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from envgym.bundle import write_manifest
from envgym.bundle_write import copy_code_files, write_tasks
from envgym.cache import source_keyed_bundle
from envgym.envs.harbor.task import HarborTask, load_tasks

BUNDLE_VERSION = "harbor-bundle-1"
_HERE = Path(__file__).resolve().parent


def task_digest(task: HarborTask) -> str:
    """sha256 over every byte the task holds (task.toml, instruction, the three trees)."""
    digest = hashlib.sha256()
    digest.update(task.toml_text.encode())
    digest.update(b"\0" + task.instruction.encode() + b"\0" + (task.dockerfile or "").encode())
    for name, tree in (
        ("environment", task.environment),
        ("tests", task.tests),
        ("solution", task.solution),
    ):
        for rel in sorted(tree.files):
            data, mode = tree.files[rel]
            digest.update(f"\0{name}/{rel}\0{mode}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def _write(out: Path, name: str, tasks: list[HarborTask], digests: dict[str, str]) -> None:
    (out / "state").mkdir(parents=True)
    (out / "state" / "harbor_tasks.json").write_text(json.dumps(digests, indent=1, sort_keys=True))
    lines = [
        {
            "id": t.id,
            "prompt": t.instruction[:2000],
            "solution": "harbor_solve_sh",
            "verifier": "harbor_reward",
            "submit_tool": None,  # HarborEnv has its own submit; the bundle only lists tasks
            "metadata": {"harbor_id": t.id, "digest": digests[t.id]},
        }
        for t in tasks
    ]
    write_tasks(out, lines)
    copy_code_files(_HERE / "bundle_files", out)
    write_manifest(out, name=name, category="harbor", description=f"Harbor tasks under {name}, run by envgym/envs/harbor",
                   provenance={"agent": "harbor-import"})  # fmt: skip


def bundle_dir(path: str | Path) -> Path:
    """The descriptor bundle of ``path`` (a task or dataset directory), built once per content."""
    tasks = load_tasks(path)
    digests = {t.id: task_digest(t) for t in tasks}
    identity = json.dumps([BUNDLE_VERSION, digests], sort_keys=True)
    name = "harbor-" + hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:8]
    return source_keyed_bundle(
        name, identity, (_HERE,), lambda out: _write(out, name, tasks, digests)
    )
