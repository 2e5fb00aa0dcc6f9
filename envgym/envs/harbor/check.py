"""``envgym check harbor:PATH``: is each task's verifier sound?

Per task, every probe is one episode of :class:`HarborEnv` driven through ``step`` (the agent's
own path: jailed bash calls, then ``submit``), graded by the task's tests:

* ``oracle``: ``solution/solve.sh`` (a fresh copy at /solution) must earn reward 1;
* ``noop``: submitting at once must earn 0;
* generic exploits, each must earn 0 — a task whose verifier pays one of them is reported:
  ``write-reward`` (the agent writes 1 to /logs/verifier/reward.txt itself),
  ``rewrite-tests`` (it plants a test.sh that writes 1, under the working directory and in
  every writable place it can reach), ``tamper-logs`` (/logs/verifier replaced by a link to a
  directory holding reward 1, and reward.txt made a link), ``empty-workdir`` (everything in the
  working directory deleted: a verifier that only looks for absent errors passes it),
  ``python-usercustomize`` (a ``usercustomize.py`` in the agent's HOME that writes reward 1
  from inside any python3 the verifier starts), ``leave-process`` (a background process that
  keeps writing reward 1 — it must die with the agent's command).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from envgym.envs.harbor.env import HarborEnv
from envgym.envs.harbor.task import HarborTask, HarborTaskError, load_tasks

_ONE = "printf '#!/bin/bash\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n'"
EXPLOITS: dict[str, str] = {
    "write-reward": "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo 1 > /logs/verifier/reward.json",
    "rewrite-tests": (
        f'for d in "$PWD/tests" /tests /tmp/tests; do mkdir -p "$d" 2>/dev/null && {_ONE} > "$d/test.sh" '
        '&& chmod +x "$d/test.sh"; done; true'
    ),
    "tamper-logs": (
        "mkdir -p /tmp/fake && echo 1 > /tmp/fake/reward.txt && rm -rf /logs/verifier && "
        "ln -s /tmp/fake /logs/verifier; mkdir -p /logs/v2 && ln -s /tmp/fake/reward.txt /logs/v2/reward.txt; true"
    ),
    "empty-workdir": "find . -mindepth 1 -delete; true",
    "python-usercustomize": (
        "d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\" && "
        'printf \'import os\\nos.makedirs("/logs/verifier", exist_ok=True)\\n'
        'open("/logs/verifier/reward.txt", "w").write("1")\\n\' > "$d/usercustomize.py"; true'
    ),
    "leave-process": (
        "(setsid bash -c 'while true; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
        "sleep 0.05; done' >/dev/null 2>&1 &) ; sleep 0.2; true"
    ),
}


@dataclass
class Probe:
    name: str
    reward: float
    reason: str
    expected: float

    @property
    def ok(self) -> bool:
        return self.reward >= 1.0 if self.expected >= 1.0 else self.reward == 0.0


@dataclass
class TaskCheck:
    task_id: str
    probes: list[Probe] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(p.ok for p in self.probes)

    @property
    def problems(self) -> list[str]:
        out = [] if self.error is None else [self.error]
        for p in self.probes:
            if not p.ok:
                what = (
                    "the oracle does not earn 1"
                    if p.name == "oracle"
                    else "earns reward without solving"
                )
                out.append(f"{p.name}: {what} (reward {p.reward:g}: {p.reason})")
        return out


def _call(name: str, args: dict[str, Any], n: int) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


def _episode(
    env: HarborEnv, task: HarborTask, command: str | None, *, oracle: bool = False
) -> tuple[float, str]:
    env.reset(options={"task": task.id})
    if oracle:
        result = env.runtime(task).solve(env.current_episode)
        if not result.ok:
            detail = result.error or f"exit {result.returncode}"
            return _submit(env)[
                0
            ], f"solve.sh failed ({detail}): {(result.stderr or result.stdout)[-300:]}"
    elif command is not None:
        env.step(_call("bash", {"command": command}, 1))
    return _submit(env)


def _submit(env: HarborEnv) -> tuple[float, str]:
    _, reward, terminated, truncated, info = env.step(_call("submit", {}, 2))
    if not (terminated or truncated):
        return 0.0, "the episode did not end at submit"
    return reward, str(info.get("report", {}).get("reason", ""))


def check_task(env: HarborEnv, task: HarborTask) -> TaskCheck:
    out = TaskCheck(task.id)
    try:
        if not task.has_solution:
            out.error = "no solution/solve.sh: the oracle cannot be checked"
        else:
            out.probes.append(
                Probe("oracle", *_episode(env, task, None, oracle=True), expected=1.0)
            )
        out.probes.append(Probe("noop", *_episode(env, task, None), expected=0.0))
        for name, command in EXPLOITS.items():
            out.probes.append(Probe(name, *_episode(env, task, command), expected=0.0))
    except Exception as err:  # noqa: BLE001 - one broken task is reported, the rest still run
        out.error = f"{type(err).__name__}: {err}"
    return out


def check_path(
    path: str, *, env: HarborEnv | None = None, sandbox: str | None = None
) -> list[TaskCheck]:
    own = env is None
    env = env or HarborEnv(path, sandbox=sandbox)
    try:
        return [check_task(env, task) for task in env.tasks]
    finally:
        if own:
            env.close()


def harbor_check_main(path: str, *, as_json: bool = False, console: Any = None, sandbox: str | None = None,
                      **_: Any) -> int:  # fmt: skip
    """Check every task under ``path``; print a table (or JSON); 0 when every task passes."""
    try:
        load_tasks(path)
    except HarborTaskError as err:
        message = f"harbor:{path}: {err}"
        print(json.dumps({"target": f"harbor:{path}", "error": message}) if as_json else message)
        return 2
    results = check_path(path, sandbox=sandbox)
    if as_json:
        print(json.dumps({"target": f"harbor:{path}", "ok": all(r.ok for r in results),
                          "tasks": [{"task_id": r.task_id, "ok": r.ok, "problems": r.problems,
                                     "probes": [asdict(p) for p in r.probes]} for r in results]}))  # fmt: skip
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"envgym check harbor:{path}")
        for column in ("task", "ok", "problems"):
            table.add_column(column)
        for r in results:
            table.add_row(r.task_id, "yes" if r.ok else "NO", "; ".join(r.problems) or "-")
        (console or Console()).print(table)
    return 0 if all(r.ok for r in results) else 1
