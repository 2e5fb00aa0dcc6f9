"""τ² tasks a do-nothing agent passes: re-derived through the real worker, flagged, left out.

The probes (envgym/envs/tau2/noop.py) run τ²'s own evaluation through ``.venv-tau2``'s worker; a few
tasks are re-measured here (cheap: one or two steps each) and must agree with the shipped list.
The full mock check's agreement with the list is asserted in tests/test_tau2.py (one check run).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.console import Console
from test_rollout_doubles import ScriptedPolicy

from envgym.bundle import load_bundle
from envgym.envs.tau2.env import Tau2Env
from envgym.envs.tau2.link import Tau2Link
from envgym.envs.tau2.noop import AGENT_STOP, ProbeUser, measure_domain, probe, reason
from envgym.envs.tau2.noop_data import flagged_tasks, shipped
from envgym.envs.tau2.tasks import bundle_dir, domain_tasks, envgym_task_id
from envgym.evaluate import EvalConfig, ModelRef, evaluate
from envgym.evaluate.summary import NOOP_FLAG, NOOP_REASON, noop_solvable, summarize
from envgym.rollout import EpisodeResult, RolloutBudget
from envgym.store import Store

FLAGGED_MOCK = "create_task_1_nl_eval"  # no gold action, no communicate_info: nothing to do
PLAIN_MOCK = "create_task_1"  # the agent must create a task
TRANSFER_GOLD = "impossible_task_1"  # the gold action is the transfer: doing it is the skill


@pytest.fixture(scope="module")
def link() -> Iterator[Tau2Link]:
    shared = Tau2Link()
    yield shared
    shared.close()


@pytest.mark.timeout(600)  # tens of seconds idle; minutes on a loaded 2-core machine
def test_probes_rederive_the_shipped_flags_through_the_worker(link: Tau2Link) -> None:
    ids = [PLAIN_MOCK, FLAGGED_MOCK, TRANSFER_GOLD]
    measured = measure_domain("mock", link=link, task_ids=ids)
    gold = {t["id"]: [a["name"] for a in t["actions"]] for t in domain_tasks("mock")}
    assert {tid: (p["noop"].reward, p["transfer"].reward) for tid, p in measured.items()} == {
        PLAIN_MOCK: (0.0, 0.0), FLAGGED_MOCK: (1.0, 1.0), TRANSFER_GOLD: (0.0, 1.0)}  # fmt: skip
    derived = {tid for tid, p in measured.items() if reason(p, gold[tid]) is not None}
    assert derived == {FLAGGED_MOCK} == set(flagged_tasks("mock")) & set(ids)
    # one airline task of each kind, from the shipped list, measured again
    airline = flagged_tasks("airline")
    assert len(airline) == len(shipped()["domains"]["airline"]["flagged"]) > 0
    on = min(airline)
    off = next(t["id"] for t in domain_tasks("airline") if t["id"] not in airline)
    env = Tau2Env("airline", user=ProbeUser(AGENT_STOP), link=link)
    try:
        got = {tid: {a: probe(env, tid, a) for a in ("noop", "transfer")} for tid in (on, off)}
        _, info_on = env.reset(options={"task": on, "user": ProbeUser(AGENT_STOP)})
        _, info_off = env.reset(options={"task": off, "user": ProbeUser(AGENT_STOP)})
    finally:
        env.close()
    airline_gold = {t["id"]: [a["name"] for a in t["actions"]] for t in domain_tasks("airline")}
    assert reason(got[on], airline_gold[on]) == airline[on]
    assert reason(got[off], airline_gold[off]) is None
    # the flag is visible at load: every reset's info says why (or None)
    assert info_on["noop_solvable"] == airline[on] and info_off["noop_solvable"] is None


def test_shipped_list_is_well_formed_and_names_real_tasks() -> None:
    data = shipped()
    assert data["command"] == "python -m envgym.envs.tau2.noop --write" and set(data["agents"]) == {
        "noop",
        "transfer",
    }
    assert set(data["domains"]) == {"airline", "retail", "telecom", "mock"}
    for domain, entry in data["domains"].items():
        ids = {t["id"] for t in domain_tasks(domain)}
        assert set(entry["flagged"]) <= ids and entry["tasks_measured"] <= len(ids)
        for row in entry["flagged"].values():
            assert row["reason"].endswith(" 1.0 in τ²'s own evaluation") and 1.0 in (
                row["noop"],
                row["transfer"],
            )


def test_descriptor_bundle_carries_the_flag() -> None:
    bundle = load_bundle(bundle_dir("mock"))
    assert noop_solvable(bundle.tasks) == {
        envgym_task_id(t): r for t, r in flagged_tasks("mock").items()
    }
    task = next(t for t in bundle.tasks if t.id == FLAGGED_MOCK)
    assert task.metadata[NOOP_FLAG] is True and "does nothing" in task.metadata[NOOP_REASON]


def _episode(task: str, sample: int, reward: float, error: str | None = None) -> EpisodeResult:
    return EpisodeResult(task, sample, reward=reward, terminated=True, error=error)


def test_summary_leaves_flagged_tasks_out_of_every_across_task_number() -> None:
    eps = [_episode("free", s, 1.0) for s in range(2)] + [
        _episode("hard", s, 0.0) for s in range(2)
    ]
    official = summarize(eps, k=2)
    assert official.pass_at_k[1].value == 0.5 and official.excluded_tasks == {}
    ours = summarize(eps, k=2, exclude={"free": "a do-nothing agent passes it", "absent": "x"})
    assert ours.pass_at_k[1].value == 0.0 and ours.pass_hat_k[2].value == 0.0
    assert ours.mean_reward.value == 0.0 and ours.tasks == 1
    assert ours.excluded_tasks == {"free": "a do-nothing agent passes it"}  # only tasks evaluated
    assert [t.task_id for t in ours.per_task] == ["free", "hard"]  # still listed per task
    assert ours.episodes == 4 and ours.to_dict()["excluded_tasks"] == ours.excluded_tasks


class _HelpUser(BaseHTTPRequestHandler):
    """τ²'s user as an OpenAI-compatible endpoint: asks for help, then stops (no model to load)."""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # the stdlib's name
        self.rfile.read(int(self.headers["Content-Length"]))
        message = {"role": "assistant", "content": "I need help with my request."}
        data = json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def help_user(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _HelpUser)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1#user"
    monkeypatch.setenv("ENVGYM_TAU2_USER_MODEL", url)
    try:
        yield url
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.timeout(300)
def test_eval_leaves_noop_tasks_out_by_default_and_scores_them_on_request(
    tmp_path: Path, help_user: str
) -> None:
    from envgym.commands.eval_report import print_summary

    stop = ScriptedPolicy(lambda task, sample: [AGENT_STOP])  # type: ignore[arg-type]
    ref = ModelRef("noop-agent", "test", "noop:v1")
    config = EvalConfig(
        k=1, limit=3, concurrency=1, budget=RolloutBudget(max_turns=2, max_seconds=120)
    )
    store = Store(f"sqlite:///{tmp_path / 'eval.db'}")
    try:
        ours = evaluate("tau2-mock-v0", ref, config, store=store, policy=stop)
        official = evaluate("tau2-mock-v0", ref, EvalConfig(**{**config.__dict__, "include_noop_tasks": True}),
                            store=store, policy=ScriptedPolicy(lambda task, sample: [AGENT_STOP]))  # type: ignore[arg-type]  # fmt: skip
    finally:
        store.close()
    passed = {e.task_id for e in ours.episodes if e.passed}
    assert passed == {FLAGGED_MOCK}  # the do-nothing agent "solves" exactly the flagged task
    assert ours.summary.excluded_tasks == {FLAGGED_MOCK: flagged_tasks("mock")[FLAGGED_MOCK]}
    assert ours.summary.pass_at_k[1].value == 0.0
    # the option only changes scoring: same key, no episode rerun, τ²'s official number
    assert official.key == ours.key and official.ran == 0 and official.summary.excluded_tasks == {}
    valid = [e for e in official.episodes if e.error is None]
    assert official.summary.pass_at_k[1].value == pytest.approx(1 / len(valid))
    console = Console(record=True, width=200)
    print_summary(ours, console)
    text = console.export_text()
    assert "1 tasks excluded from pass@k, pass^k and mean reward" in text
    assert (
        "an agent that does nothing" in text
        and FLAGGED_MOCK in text
        and "--include-noop-tasks" in text
    )


@pytest.mark.timeout(300)
def test_the_measurement_runs_without_a_list_and_the_env_names_a_missing_one(
    link: Tau2Link, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regenerating must not need the file it writes; an env without it says how to make it."""
    from envgym.envs.tau2 import noop_data

    monkeypatch.setattr(noop_data, "DATA", tmp_path / "absent.json")
    noop_data.shipped.cache_clear()
    try:
        measured = measure_domain("mock", link=link, task_ids=[FLAGGED_MOCK])
        assert measured[FLAGGED_MOCK]["noop"].reward == 1.0
        with pytest.raises(
            RuntimeError, match=r"no-op task list .*python -m envgym.envs.tau2.noop --write"
        ):
            Tau2Env("mock", link=link)
    finally:
        noop_data.shipped.cache_clear()


def test_check_prints_a_noop_task_and_a_stale_list_as_problems() -> None:
    from envgym.envs.tau2.check_cli import _print
    from envgym.envs.tau2.oracle import Tau2CheckReport, Tau2TaskCheck

    odd = "[service_issue]lock_sim_card_pin[PERSONA:Easy]"  # rich would read [..] as markup
    flagged = Tau2TaskCheck(odd, ("DB",), gold_reward=1.0, noop_reward=1.0, transfer_reward=1.0,
                            noop_reason="an agent that does nothing scores 1.0: no communicate_info")  # fmt: skip
    plain = Tau2TaskCheck("7", ("DB",), gold_reward=1.0, noop_reward=0.0, transfer_reward=0.0)
    report = Tau2CheckReport("telecom", (flagged, plain), stale=("7: measured flagged, …",))
    assert flagged.gold_passed and not flagged.passed and plain.passed and not report.passed
    assert report.to_dict()["gold_passed"] == 2 and report.to_dict()["noop_list_stale"] == [
        "7: measured flagged, …"
    ]
    console = Console(record=True, width=300)
    _print(report, console)
    text = console.export_text()
    assert f"problem: {odd}: an agent that does nothing scores 1.0" in text
    assert (
        "problem: 7: measured flagged" in text and "FAILED: 2/2 tasks pass the gold check" in text
    )
