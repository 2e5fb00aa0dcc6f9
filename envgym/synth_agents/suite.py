"""A suite: K validated bundles for each of many categories, split by category, deduplicated.

``envgym synth --categories FILE|all --per-category K --out DIR`` runs the ordinary pipeline
(``run_synthesis``, the same validation as ``envgym synth CATEGORY``) once per category into
``DIR/work/<slug>/`` (its own journal, resumable as always), then *admits* each kept bundle into
the suite, in category order and job order:

* its environment is dropped when an admitted one has the same tool signature set (name +
  argument schema) and task texts sharing at least ``dedup.THRESHOLD`` of their word
  3-shingles (``duplicate_environment``);
* its tasks that near-duplicate an admitted task of *any* category (``dedup``'s rule) are
  dropped; a bundle left with none is dropped (``duplicate_tasks``);
* otherwise it is copied into ``.staging/``, its duplicate tasks removed (manifest re-hashed),
  renamed into ``bundles/<slug>/<key>/`` and only then journaled in ``DIR/suite.jsonl``.

The journal is the commit point: a bundle directory without a journal record (a kill between
the rename and the append) is removed and admitted again, identically; a journaled one is never
admitted twice.  ``suite.json`` is rewritten (atomically) from the journal after each category.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.bundle import load_bundle, write_manifest
from envgym.store import Store
from envgym.suite_manifest import FORMAT, MANIFEST, SPLITS, VERSION, SuiteError, load_suite
from envgym.synth_agents.dedup import THRESHOLD, NearDuplicateIndex, jaccard, shingles
from envgym.synth_agents.journal import Journal, JournalError
from envgym.synth_agents.pipeline import SynthAgent, ValidationSettings, jobs_for, run_synthesis
from envgym.synth_agents.procedural import ProceduralAgent
from envgym.synth_agents.recorder import SynthRecorder
from envgym.synth_agents.suite_categories import split_categories

JOURNAL = "suite.jsonl"
WORK, BUNDLES, STAGING = "work", "bundles", ".staging"
# Arguments a rerun must repeat (they change which bundles exist or where they go); workers and
# the sandbox do not, and --per-category may grow (job i is the same job in every run).
FIXED = (
    "categories",
    "seed",
    "held_out_share",
    "validation_share",
    "tasks_per_bundle",
    "difficulties",
    "max_rows",
)
# What a journal written before a FIXED key existed meant by it.
FIXED_BEFORE = {"validation_share": 0.0}

Progress = Callable[[str, int, int], None]  # (category, done, total)


@dataclass(frozen=True)
class SuiteConfig:
    categories: tuple[str, ...]  # canonical names (find_category), in run order
    per_category: int
    seed: int = 0
    held_out_share: float = 0.2
    validation_share: float = 0.0  # categories for choices made during training (not held out)
    tasks_per_bundle: int = 3
    difficulties: tuple[int, ...] = (1, 2, 3, 4, 5)
    sandbox: str = "bwrap"
    workers: int = 1
    max_rows: int | None = None  # cap every table (spec-compiled categories; a smaller world)

    def check(self) -> None:
        if self.per_category < 1:
            raise SuiteError(f"--per-category must be at least 1, not {self.per_category}")
        if not 0.0 <= self.held_out_share < 1.0:
            raise SuiteError(f"--held-out-share must be in [0, 1), not {self.held_out_share}")
        if not 0.0 <= self.validation_share < 1.0:
            raise SuiteError(f"--validation-share must be in [0, 1), not {self.validation_share}")
        if self.held_out_share + self.validation_share >= 1.0:
            raise SuiteError(
                f"--held-out-share {self.held_out_share} and --validation-share "
                f"{self.validation_share} leave no share of the categories to train on"
            )
        if not self.categories:
            raise SuiteError("the suite has no categories")
        if self.max_rows is not None:  # every category is checked before any job runs
            for name in self.categories:
                try:
                    ProceduralAgent(name, self.tasks_per_bundle, self.difficulties, self.max_rows)
                except ValueError as exc:
                    raise SuiteError(str(exc)) from None


def _journal(out: Path) -> Journal:
    try:
        return Journal(out / JOURNAL)
    except JournalError as exc:
        raise SuiteError(f"the suite journal is damaged: {exc}") from None


def _check_config(journal: Journal, config: SuiteConfig) -> None:
    wanted = {k: _plain(getattr(config, k)) for k in FIXED}
    record = journal.get("config", "suite")
    if record is None:
        journal.append("config", "suite", wanted)
        return
    for key in FIXED:
        was = record.get(key, FIXED_BEFORE.get(key))
        if was != wanted[key]:
            raise SuiteError(
                f"{journal.path} was started with {key}={was!r}, not {wanted[key]!r}; "
                "rerun with the same arguments to resume, or use another --out"
            )


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def procedural_agent(name: str, config: SuiteConfig) -> SynthAgent:
    return ProceduralAgent(name, config.tasks_per_bundle, config.difficulties, config.max_rows)


def build_suite(
    config: SuiteConfig,
    out: Path,
    store: Store | None,
    progress: Progress | None = None,
    agent_factory: Callable[[str, SuiteConfig], SynthAgent] = procedural_agent,
) -> dict[str, Any]:
    """Build (or resume) the suite in ``out``; returns the manifest it wrote.

    ``agent_factory`` makes each category's agent (the procedural one; tests pass their own)."""
    config.check()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if (out / MANIFEST).exists():
        load_suite(out)  # a damaged manifest is named, not silently replaced
    journal = _journal(out)
    _check_config(journal, config)
    shutil.rmtree(out / STAGING, ignore_errors=True)
    index = Admissions.recover(out, journal, config.sandbox)
    settings = ValidationSettings(sandbox=config.sandbox)
    manifest: dict[str, Any] = {}
    for name in config.categories:
        agent = agent_factory(name, config)
        recorder = SynthRecorder(out / WORK / agent.slug, store)
        try:
            run_synthesis(
                agent,
                n=config.per_category,
                seed=config.seed,
                recorder=recorder,
                settings=settings,
                workers=config.workers,
                progress=(lambda d, t, _r, n=name: progress(n, d, t)) if progress else None,
            )
        except JournalError as exc:
            raise SuiteError(f"the journal of {name!r} is damaged: {exc}") from None
        for job in jobs_for(agent, config.per_category, config.seed):
            record = recorder.job(job.key)
            if record and record.get("status") == "kept":
                index.admit(agent.slug, record, recorder.final(record))
        manifest = write_suite_manifest(out, config, journal)
    return manifest


@dataclass
class _Env:
    key: str
    signatures: frozenset[str]
    grams: frozenset[str]


class Admissions:
    """The suite-wide near-duplicate state and the admission step."""

    def __init__(self, out: Path, journal: Journal, sandbox: str) -> None:
        self.out, self.journal, self.sandbox = out, journal, sandbox
        self.tasks = NearDuplicateIndex()
        self.envs: list[_Env] = []

    @classmethod
    def recover(cls, out: Path, journal: Journal, sandbox: str) -> Admissions:
        self = cls(out, journal, sandbox)
        for record in journal.records("bundle"):
            if record["status"] == "included":
                root = out / record["path"]
                if not root.is_dir():
                    raise SuiteError(f"the journaled bundle {root} is missing")
                self._remember(record["key"], root, record["signatures"], record["state_hash"])
        return self

    def _remember(self, key: str, root: Path, signatures: list[str], state_hash: str) -> None:
        tasks = _tasks(root)
        for t in tasks:
            self.tasks.add("", f"{key}/{t['id']}", t["prompt"], state_hash, t.get("metadata", {}))
        self.envs.append(_Env(key, frozenset(signatures), _env_grams(tasks)))

    def admit(self, slug: str, record: dict[str, Any], source: Path) -> None:
        key = f"{slug}/{record['key']}"
        if self.journal.get("bundle", key) is not None:
            return
        tasks = _tasks(source)
        signatures = tool_signatures(source, self.sandbox)
        base = {
            "category": record["category"],
            "job": record["key"],
            "seed": record["seed"],
            "state_hash": record["state_hash"],
            "signatures": signatures,
        }
        grams = _env_grams(tasks)
        for env in self.envs:
            if env.signatures == frozenset(signatures) and jaccard(grams, env.grams) >= THRESHOLD:
                self._drop(key, base, "duplicate_environment", env.key)
                return
        kept, dropped = [], []
        for t in tasks:
            hit = self.tasks.find("", t["prompt"], record["state_hash"], t.get("metadata", {}))
            if hit is None:
                kept.append(t)
            else:
                dropped.append({"task_id": t["id"], "duplicate_of": hit[0]})
        if not kept:
            self._drop(key, base, "duplicate_tasks", dropped[0]["duplicate_of"], dropped)
            return
        rel = f"{BUNDLES}/{key}"
        content_hash = self._place(source, rel, kept if dropped else None)
        checks = {c["task_id"]: c for c in (record.get("validation") or {}).get("tasks", [])}
        self.journal.append(
            "bundle",
            key,
            {
                **base,
                "status": "included",
                "path": rel,
                "content_hash": content_hash,
                "tasks": [t["id"] for t in kept],
                "levels": [int(t.get("difficulty", 1)) for t in kept],
                "baseline": [checks.get(t["id"], {}).get("baseline_solved") for t in kept],
                "check_passed": [bool(checks.get(t["id"], {}).get("passed")) for t in kept],
                "dropped_tasks": dropped,
            },
        )
        self._remember(key, self.out / rel, signatures, record["state_hash"])

    def _drop(
        self,
        key: str,
        base: dict[str, Any],
        reason: str,
        of: str,
        dropped: list[dict[str, Any]] | None = None,
    ) -> None:
        record = {**base, "status": "dropped", "reason": reason, "duplicate_of": of}
        self.journal.append("bundle", key, {**record, "dropped_tasks": dropped or []})

    def _place(self, source: Path, rel: str, keep: list[dict[str, Any]] | None) -> str:
        """Copy the bundle into the suite (minus duplicate tasks); its content hash."""
        staging = self.out / STAGING / rel
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, staging)
        if keep is not None:
            manifest = json.loads((staging / "manifest.json").read_text())
            (staging / "tasks.jsonl").write_text(
                "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in keep)
            )
            write_manifest(
                staging,
                name=manifest["name"],
                category=manifest["category"],
                description=manifest.get("description", ""),
                provenance=manifest["provenance"],
            )
        content_hash = load_bundle(staging).manifest.content_hash
        final = self.out / rel
        shutil.rmtree(final, ignore_errors=True)  # left by a kill before its journal record
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, final)
        return content_hash


def _tasks(root: Path) -> list[dict[str, Any]]:
    lines = (root / "tasks.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def _env_grams(tasks: list[dict[str, Any]]) -> frozenset[str]:
    return frozenset().union(*(shingles(t["prompt"]) for t in tasks)) if tasks else frozenset()


def tool_signatures(root: Path, sandbox: str) -> list[str]:
    """One string per tool: its name and argument schema (descriptions left out), as the
    sandbox describes them; the bundle's code runs only in the sandbox."""
    from envgym.sandbox import open_sandbox

    with open_sandbox(root, sandbox) as box:
        specs = box.describe_tools()
    return sorted(s.name + json.dumps(_strip(s.parameters), sort_keys=True) for s in specs)


def _strip(schema: Any) -> Any:
    """The schema without free text: two tools that differ only in wording are one signature."""
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in schema.items() if k not in ("description", "title")}
    if isinstance(schema, list):
        return [_strip(v) for v in schema]
    return schema


def write_suite_manifest(out: Path, config: SuiteConfig, journal: Journal) -> dict[str, Any]:
    """suite.json from the journal, written to a temporary file and renamed over the old one."""
    from envgym.synth_agents.suite_report import suite_report

    split = split_categories(
        config.categories, config.held_out_share, config.seed, config.validation_share
    )
    order = {name: i for i, name in enumerate(config.categories)}
    records = sorted(
        journal.records("bundle"), key=lambda r: (order.get(r["category"], 1 << 30), r["seed"])
    )
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "created_by": "envgym synth --categories",
        "config": {
            **{k: _plain(getattr(config, k)) for k in FIXED},
            "per_category": config.per_category,
        },
        "splits": {s: [n for n in config.categories if split[n] == s] for s in SPLITS},
        "bundles": [
            {
                "path": r["path"],
                "category": r["category"],
                "content_hash": r["content_hash"],
                "tasks": len(r["tasks"]),
                "split": split[r["category"]],
                "seed": r["seed"],
            }
            for r in records
            if r["status"] == "included"
        ],
        "dropped": [
            {k: r[k] for k in ("key", "category", "reason", "duplicate_of")}
            for r in records
            if r["status"] == "dropped"
        ],
        "report": suite_report(out, config, records),
    }
    tmp = out / f".{MANIFEST}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out / MANIFEST)
    return manifest


__all__ = [
    "SuiteConfig",
    "SuiteError",
    "build_suite",
    "tool_signatures",
    "write_suite_manifest",
]
