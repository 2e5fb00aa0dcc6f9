"""``envgym check`` for SWE instances: gold earns 1, nothing and every known hack earn 0.

Per instance, through the real ``swe-v0`` env (its tools, its grading, its sandbox backend):

1. the gold patch replayed as tool calls (``SweEnv.gold_calls``) ``reruns`` times: each reward
   must be 1.0 and the runs must agree test for test (a flaky F2P/P2P test decides nothing);
2. an empty submission: reward 0 (else the instance's tests do not test the fix);
3. every exploit of envgym/envs/swe/exploits.py: reward 0, else the check names the exploit — except
   a rewarded ``partial_fix``, which is named ``unrelated_change[PATH]``
   (envgym/envs/swe/acceptance.py): the same file, the same name, as synthesis finds and takes out
   of the gold patch.

An instance that cannot be checked — its repository does not check out, its environment does not
set up, its gold patch does not apply, it has no FAIL_TO_PASS tests — is reported *invalid* with
the reason, and an invalid instance never passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envgym.agents import ScriptedAgent, run_episode
from envgym.envs.swe.acceptance import unrelated_reason
from envgym.envs.swe.exploits import SUBMIT, Call, exploits
from envgym.envs.swe.instance import SweInstance

Progress = Callable[[int, int, str], None]  # (instances done, total, what is running)


@dataclass(frozen=True)
class GradedSubmission:
    """One replayed submission and what grading said."""

    name: str
    reward: float
    status: str  # the grade report's tests_status ("ok", "rigged", ...)
    detail: str = ""
    outcomes: Mapping[str, str] = field(default_factory=dict)
    omitted: str = ""  # a partial fix: the gold patch's file it leaves out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reward": self.reward,
            "status": self.status,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class InstanceCheck:
    instance_id: str
    valid: bool
    reason: str  # why invalid ("" when valid)
    gold: tuple[GradedSubmission, ...] = ()
    empty: GradedSubmission | None = None
    exploits: tuple[GradedSubmission, ...] = ()
    seconds: float = 0.0

    @property
    def gold_ok(self) -> bool:
        return bool(self.gold) and all(e.reward == 1.0 for e in self.gold)

    @property
    def reruns_agree(self) -> bool:
        return len({tuple(sorted(e.outcomes.items())) for e in self.gold}) <= 1

    @property
    def rewarded_exploits(self) -> list[str]:
        return [e.name for e in self.exploits if e.reward > 0]

    @property
    def unrelated(self) -> list[str]:
        """Gold patch files the tests do not need: their partial fix was rewarded."""
        return [e.omitted for e in self.exploits if e.reward > 0 and e.omitted]

    @property
    def problems(self) -> list[str]:
        if not self.valid:
            return [f"invalid: {self.reason}"]
        found = []
        if not self.gold_ok:
            bad = next((e for e in self.gold if e.reward != 1.0), None)
            found.append(f"gold reward {[e.reward for e in self.gold]}"
                         + (f" ({bad.status}: {bad.detail})" if bad else ""))  # fmt: skip
        if not self.reruns_agree:
            found.append("gold reruns disagree")
        if self.empty is None or self.empty.reward != 0.0:
            found.append("an empty submission is rewarded")
        found += [unrelated_reason(path) for path in self.unrelated]
        found += [
            f"exploit rewarded: {e.name}" for e in self.exploits if e.reward > 0 and not e.omitted
        ]
        return found

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "passed": self.passed, "valid": self.valid, "reason": self.reason,
                "gold_rewards": [e.reward for e in self.gold], "reruns_agree": self.reruns_agree,
                "empty_reward": None if self.empty is None else self.empty.reward,
                "exploits": [e.to_dict() for e in self.exploits], "rewarded_exploits": self.rewarded_exploits,
                "unrelated_changes": self.unrelated,
                "problems": self.problems, "seconds": round(self.seconds, 3)}  # fmt: skip


@dataclass(frozen=True)
class SweCheckReport:
    target: str
    backend: str
    reruns: int
    instances: tuple[InstanceCheck, ...]
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.instances) and all(i.passed for i in self.instances)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "backend": self.backend, "reruns": self.reruns, "passed": self.passed,
                "instances": [i.to_dict() for i in self.instances],
                "failed": [i.instance_id for i in self.instances if not i.passed],
                "exploits_tried": sum(len(i.exploits) for i in self.instances),
                "exploits_rewarded": sum(len(i.rewarded_exploits) for i in self.instances),
                "seconds": round(self.seconds, 3)}  # fmt: skip


def check_instances(
    instances: Iterable[SweInstance],
    *,
    backend: str = "bwrap",
    reruns: int = 2,
    target: str = "",
    python_env: Any = None,
    progress: Progress | None = None,
    env_options: Mapping[str, Any] | None = None,
) -> SweCheckReport:
    """Check every instance (see the module docstring); ``python_env`` skips environment setup."""
    if reruns < 1:
        raise ValueError("reruns must be at least 1")
    todo = list(instances)
    started = time.monotonic()
    checked = []
    for done, instance in enumerate(todo):
        if progress is not None:
            progress(done, len(todo), instance.instance_id)
        checked.append(check_instance(instance, backend=backend, reruns=reruns, python_env=python_env,
                                      env_options=env_options))  # fmt: skip
    if progress is not None:
        progress(len(todo), len(todo), "")
    return SweCheckReport(target, backend, reruns, tuple(checked), time.monotonic() - started)


def check_instance(
    instance: SweInstance,
    *,
    backend: str = "bwrap",
    reruns: int = 2,
    python_env: Any = None,
    env_options: Mapping[str, Any] | None = None,
) -> InstanceCheck:
    from envgym.envs.swe.env import SweEnv

    started = time.monotonic()

    def invalid(reason: str) -> InstanceCheck:
        return InstanceCheck(
            instance.instance_id, False, reason, seconds=time.monotonic() - started
        )

    if not instance.fail_to_pass:
        return invalid("no FAIL_TO_PASS tests (validate the instance first: `envgym synth swe`)")
    env = SweEnv(instance, backend=backend, python_env=python_env, max_turns=1000, max_tool_calls=1000,
                 **dict(env_options or {}))  # fmt: skip
    try:
        try:
            env.reset()  # checks out the base and sets the environment up (once per env)
            gold = env.gold_calls()
        except Exception as err:  # noqa: BLE001 - an unusable instance is reported, never a pass
            return invalid(f"{type(err).__name__}: {err}")
        gold_runs = tuple(_replay(env, "gold", gold) for _ in range(reruns))
        empty = _replay(env, "empty", [SUBMIT])
        tried = tuple(_replay(env, e.name, e.calls, e.omitted) for e in exploits(instance, gold))
    finally:
        env.close()
    return InstanceCheck(
        instance.instance_id, True, "", gold_runs, empty, tried, time.monotonic() - started
    )


def _replay(env: Any, name: str, calls: Iterable[Call], omitted: str = "") -> GradedSubmission:
    """One episode of ``calls`` on a fresh checkout; grading's verdict."""
    result = run_episode(env, ScriptedAgent(list(calls)))
    grade = env.grade_result
    report = dict(grade.report) if grade is not None else {}
    detail = str(report.get("detail", "")).strip().splitlines()
    return GradedSubmission(name, result.reward, str(report.get("tests_status", "?")), detail[0][:200] if detail else "",
                   dict(report.get("outcomes") or {}), omitted)  # fmt: skip
