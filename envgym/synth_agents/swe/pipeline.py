"""``envgym synth swe``: SWE instances from a repository's history — mined, judged, validated.

    envgym synth swe --repo PATH_OR_URL --out OUT [--max-candidates N] [--repeats R]
                     [--sandbox bwrap|docker] [--judge-model URL#model]

1. **Mine** (envgym/envs/swe/miner.py): every first-parent commit that changes source and tests is a
   candidate; the rest are rejected by named heuristics.  Candidates are ranked by the miner's
   score (history order breaks ties) and the first ``max_candidates`` go on.
2. **Judge** (optional, ``--judge-model``): an OpenAI-compatible model says whether the problem
   statement is solvable without the patch (``miner.llm_judge``).
3. **Validate** (envgym/envs/swe/validation.py): set the environment up, run the tests ``repeats``
   times without and with the gold patch; accepted iff F2P > 0 and P2F = 0, flaky tests excluded.

Accepted instances go to ``OUT/instances.jsonl`` (F2P/P2P/version filled in), every rejection
with its stage and reason to ``OUT/rejected.jsonl``; both are rewritten from the journal after
each candidate.  Every stage result is a record of ``OUT/journal.jsonl``
(envgym/synth_agents/journal.py), so a killed run resumes where it stopped without redoing a judged
or validated candidate; the settings that decide results are the journal's first record, and
resuming with others is refused.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from envgym.envs.swe.instance import SweInstance, from_record, to_record, write_instances
from envgym.synth_agents.journal import Journal

JOURNAL = "journal.jsonl"
INSTANCES = "instances.jsonl"
REJECTED = "rejected.jsonl"
SETUP_STATUSES = ("checkout_failed", "setup_failed")  # validation statuses that are setup failures

Progress = Callable[[int, int, str], None]  # (candidates done, candidates, what is running)


@dataclass(frozen=True)
class SweSynthConfig:
    repo: str  # a local path (made absolute) or a clone URL
    max_candidates: int = 20  # may grow on resume: the ranking is deterministic
    repeats: int = 2
    sandbox: str = "bwrap"
    judge_model: str = ""  # "URL#model" of an OpenAI-compatible server; "" for none
    rev: str = "HEAD"

    def __post_init__(self) -> None:
        if self.max_candidates < 1 or self.repeats < 1:
            raise ValueError("--max-candidates and --repeats must be >= 1")
        if self.sandbox not in ("bwrap", "docker"):
            raise ValueError(f"--sandbox must be 'bwrap' or 'docker' for swe, not {self.sandbox!r}")
        if self.judge_model and "#" not in self.judge_model:
            raise ValueError(f"--judge-model must look like URL#model, not {self.judge_model!r}")

    def identity(self) -> dict[str, Any]:
        """What must match for a journal to be resumed (``max_candidates`` may change)."""
        same = asdict(self)
        same.pop("max_candidates")
        return same


def normalized_repo(repo: str) -> str:
    """A local repository's absolute path (instances outlive the working directory); URLs as given."""
    return str(Path(repo).resolve()) if Path(repo).exists() else repo


def category(reason: str) -> str:
    """A reason's name: its words before the first ':' or '(' ("too large: 40 files" → "too large")."""
    return re.split(r"[:(;]", reason, maxsplit=1)[0].strip() or reason


class SweSynthesis:
    """One (resumable) run into ``out``."""

    def __init__(
        self,
        out: Path,
        config: SweSynthConfig,
        *,
        judge: Callable[[SweInstance], tuple[bool, str]] | None = None,
    ) -> None:
        self.out = Path(out)
        self.config = config
        self.journal = Journal(self.out / JOURNAL)
        settings = self.journal.get("run", "config")
        if settings is None:
            self.journal.append("run", "config", {"config": config.identity()})
        elif settings["config"] != config.identity():
            raise ValueError(f"{self.out} holds a run with other settings ({settings['config']}); "
                             "resume with the same settings or use a fresh --out")  # fmt: skip
        self._judge = judge

    # -- stages ---------------------------------------------------------------------------
    def mined(self) -> dict[str, Any]:
        """The mining record (mined once; a resumed run reads it back)."""
        found = self.journal.get("mine", "history")
        if found is None:
            from envgym.envs.swe.miner import mine

            started = time.monotonic()
            result = mine(self.config.repo, rev=self.config.rev)
            ranked = sorted(
                enumerate(result.candidates),
                key=lambda p: (-float(p[1].metadata.get("score", 0)), p[0]),
            )
            self.journal.append("mine", "history", {
                "candidates": [to_record(c) for _, c in ranked], "rejected": [list(r) for r in result.rejected],
                "commits": len(result.candidates) + len(result.rejected), "seconds": round(time.monotonic() - started, 3)})  # fmt: skip
            found = self.journal.get("mine", "history")
        assert found is not None
        return found

    def run(self, progress: Progress | None = None) -> dict[str, Any]:
        started = time.monotonic()
        mined = self.mined()
        todo = [from_record(r) for r in mined["candidates"][: self.config.max_candidates]]
        for done, candidate in enumerate(todo):
            if progress is not None:
                progress(done, len(todo), candidate.instance_id)
            self._candidate(candidate)
            self.write_outputs()
        if progress is not None:
            progress(len(todo), len(todo), "")
        self.write_outputs()
        return self.summary(todo, time.monotonic() - started)

    def _candidate(self, candidate: SweInstance) -> None:
        key = candidate.instance_id
        if self.journal.get("validate", key) is not None:
            return
        if self.config.judge_model:
            verdict = self.journal.get("judge", key) or self._judged(candidate)
            if not verdict["keep"]:
                return
        from envgym.envs.swe.validation import validate_instance

        started = time.monotonic()
        report = validate_instance(
            candidate, backend=self.config.sandbox, repeats=self.config.repeats
        )
        instance = report.instance
        if report.accepted:
            instance = replace(instance, metadata={**instance.metadata, "validation": {
                "repeats": self.config.repeats, "backend": self.config.sandbox, "flaky": list(report.flaky)}})  # fmt: skip
        self.journal.append("validate", key, {
            "accepted": report.accepted, "status": report.status, "reason": report.reason,
            "flaky": list(report.flaky), "instance": to_record(instance) if report.accepted else None,
            "timings": dict(report.timings), "seconds": round(time.monotonic() - started, 3)})  # fmt: skip

    def _judged(self, candidate: SweInstance) -> dict[str, Any]:
        judge = self._judge or self._llm_judge()
        try:
            keep, reason = judge(candidate)
        except Exception as exc:  # noqa: BLE001 - a judge's bug costs this candidate, not the run
            keep, reason = False, f"judge failed: {type(exc).__name__}: {exc}"
        reason = reason if keep or reason.startswith("judge") else f"judge: {reason}"
        self.journal.append("judge", candidate.instance_id, {"keep": keep, "reason": reason})
        return self.journal.get("judge", candidate.instance_id)  # type: ignore[return-value]

    def _llm_judge(self) -> Callable[[SweInstance], tuple[bool, str]]:
        from envgym.envs.swe.miner import llm_judge

        url, _, model = self.config.judge_model.rpartition("#")
        self._judge = llm_judge(url, model, api_key=os.environ.get("OPENAI_API_KEY"))
        return self._judge

    # -- outputs --------------------------------------------------------------------------
    def accepted(self) -> list[SweInstance]:
        records = sorted(self.journal.records("validate"), key=lambda r: r["key"])
        return [from_record(r["instance"]) for r in records if r["accepted"]]

    def rejections(self) -> list[dict[str, Any]]:
        mined = self.journal.get("mine", "history") or {"rejected": []}
        rows = [{"commit": sha, "stage": "mine", "category": category(reason), "reason": reason}
                for sha, reason in mined["rejected"]]  # fmt: skip
        rows += [{"instance_id": r["key"], "stage": "judge", "category": category(r["reason"]), "reason": r["reason"]}
                 for r in sorted(self.journal.records("judge"), key=lambda r: r["key"]) if not r["keep"]]  # fmt: skip
        for r in sorted(self.journal.records("validate"), key=lambda r: r["key"]):
            if not r["accepted"]:
                stage = "setup" if r["status"] in SETUP_STATUSES else "validate"
                rows.append({"instance_id": r["key"], "stage": stage, "status": r["status"],
                             "category": category(r["reason"]) if r["status"] == "rejected" else r["status"],
                             "reason": r["reason"]})  # fmt: skip
        return rows

    def write_outputs(self) -> None:
        write_instances(self.out / INSTANCES, self.accepted())
        lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in self.rejections())
        scratch = self.out / f".{REJECTED}.partial"
        scratch.write_text(lines, encoding="utf-8")
        os.replace(scratch, self.out / REJECTED)  # atomic, as write_instances is

    def summary(self, todo: list[SweInstance], seconds: float) -> dict[str, Any]:
        mined = self.mined()
        rows = self.rejections()
        by = {
            stage: Counter(r["category"] for r in rows if r["stage"] == stage)
            for stage in ("mine", "judge", "setup", "validate")
        }
        validated = [self.journal.get("validate", c.instance_id) for c in todo]
        return {"repo": self.config.repo, "out": str(self.out), "config": self.config.identity(),
                "commits": mined["commits"], "candidates": len(mined["candidates"]), "considered": len(todo),
                "rejected_heuristic": dict(by["mine"]), "rejected_judge": dict(by["judge"]),
                "setup_failures": dict(by["setup"]), "rejected_validation": dict(by["validate"]),
                "validated": sum(v is not None for v in validated),
                "accepted": sum(bool(v and v["accepted"]) for v in validated),
                "flaky_excluded": sum(len(v["flaky"]) for v in validated if v),
                "instances": str(self.out / INSTANCES), "rejected": str(self.out / REJECTED),
                "seconds": round(seconds, 2)}  # fmt: skip


def summary_rows(payload: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The summary table's rows: (stage, count, note)."""
    rows = [
        ("commits walked", str(payload["commits"]), "first-parent history"),
        (
            "mined candidates",
            str(payload["candidates"]),
            f"{payload['considered']} considered (--max-candidates)",
        ),
    ]
    for title, key in (
        ("rejected (heuristic)", "rejected_heuristic"),
        ("rejected (judge)", "rejected_judge"),
        ("setup failure", "setup_failures"),
        ("rejected (validation)", "rejected_validation"),
    ):
        rows += [
            (f"{title}: {name}", str(count), "")
            for name, count in sorted(payload[key].items(), key=lambda kv: -kv[1])
        ]
    rows.append(
        ("accepted", str(payload["accepted"]), f"{payload['flaky_excluded']} flaky tests excluded")
    )
    rows.append(("wall time", f"{payload['seconds']:.1f} s", ""))
    return rows
