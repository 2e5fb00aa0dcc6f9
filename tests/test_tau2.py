"""τ²-bench adapter (envgym/envs/tau2): the oracle check, bad gold actions, the worker, seeded
replay.

τ² runs from ``.venv-tau2`` (scripts/setup.sh builds it); every test talks to the real τ²
package through the real worker.  The embedded SmolLM2 plays τ²'s user in the replay tests.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envgym.envs.tau2.check_cli import tau2_domain
from envgym.envs.tau2.env import Tau2Env
from envgym.envs.tau2.link import Tau2Error, Tau2Link
from envgym.envs.tau2.noop_data import flagged_tasks
from envgym.envs.tau2.oracle import check_domain
from envgym.envs.tau2.simulator import PolicyUser, ReplayUser, UserTurnError, user_seed
from envgym.envs.tau2.tasks import domain_tasks, envgym_task_id
from envgym.policy import SamplingParams


@pytest.fixture(scope="module")
def link() -> Tau2Link:
    shared = Tau2Link()
    yield shared
    shared.close()


@pytest.mark.timeout(300)
def test_check_mock_reports_every_task(link: Tau2Link) -> None:
    report = check_domain("mock", link=link)
    by_id = {t.task_id: t for t in report.tasks}
    assert len(report.tasks) == len(domain_tasks("mock")) == 9
    # τ²'s data gives this task an env assertion (task_2 completed) but no gold action to reach it:
    # envgym supplies the action the assertion names, and says so.
    supplied = by_id["update_task_with_history_and_env_assertions"]
    assert (
        supplied.supplied_gold
        and supplied.gold_calls == 1
        and "gold supplied by envgym" in supplied.notes[0]
    )
    assert report.failed == [] and report.stale == ()
    assert [t.task_id for t in report.tasks if t.supplied_gold] == [supplied.task_id]
    for t in report.tasks:
        assert t.gold_passed and t.gold_reward == 1.0, (t.task_id, t.problems)
    # without the supplied action, the task fails on its env assertion (what τ²'s data alone gives)
    bare = check_domain(
        "mock",
        link=link,
        tasks=[t for t in domain_tasks("mock") if t["id"] == supplied.task_id],
        supplied={},
    )
    assert not bare.passed and any(p.startswith("ENV:") for p in bare.tasks[0].problems)
    # A task with no gold action and no communicate_info scores 1.0 for a do-nothing agent: a
    # problem of the check, and exactly what the shipped no-op list says (noop_tasks.json)
    assert (
        [t.task_id for t in report.noop_full]
        == ["create_task_1_nl_eval"]
        == sorted(flagged_tasks("mock"))
    )
    assert not report.passed and not by_id["create_task_1_nl_eval"].passed
    assert "an agent that does nothing" in str(by_id["create_task_1_nl_eval"].noop_reason)
    assert by_id["create_task_1"].noop_reward == by_id["create_task_1"].transfer_reward == 0.0
    # the transfer is impossible_task_1's gold answer: rewarded, and not a flag
    assert by_id["impossible_task_1"].transfer_reward == 1.0 and by_id["impossible_task_1"].passed


@pytest.mark.timeout(300)
def test_check_airline_first_tasks_pass(link: Tau2Link) -> None:
    report = check_domain("airline", limit=3, link=link)
    assert report.failed == [] and [t.gold_reward for t in report.tasks] == [1.0, 1.0, 1.0]
    # airline 0 and 1 reward an agent that does nothing: problems, as the shipped list says
    assert [t.task_id for t in report.noop_full] == ["0", "1"] and not report.passed
    assert (
        report.stale == ()
        and {"0", "1"} <= set(flagged_tasks("airline"))
        and "2" not in flagged_tasks("airline")
    )
    assert sum(t.gold_calls for t in report.tasks) > 0  # some airline tasks have no gold action


@pytest.mark.timeout(300)
def test_check_telecom_user_actions_run_as_the_user(link: Tau2Link) -> None:
    tasks = [
        t for t in domain_tasks("telecom") if any(a["requestor"] == "user" for a in t["actions"])
    ][:2]
    report = check_domain("telecom", tasks=tasks, link=link)
    assert len(report.tasks) == 2 and report.passed, [t.problems for t in report.tasks]
    assert all(t.gold_reward == 1.0 and t.noop_reward == 0.0 for t in report.tasks)


@pytest.mark.timeout(120)
def test_failing_gold_action_fails_the_check(link: Tau2Link) -> None:
    """Bad input: a gold action τ² rejects is a check failure naming the action, never hidden."""
    task = copy.deepcopy(next(t for t in domain_tasks("mock") if t["id"] == "create_task_1"))
    task["actions"][0]["arguments"]["user_id"] = "no_such_user"
    report = check_domain("mock", tasks=[task], link=link)
    (only,) = report.tasks
    assert not report.passed and not only.passed
    assert any("gold action create_task (assistant) failed in τ²" in p for p in only.problems), (
        only.problems
    )
    assert report.to_dict()["failed"] == ["create_task_1"]


@pytest.mark.timeout(120)
def test_worker_errors_are_named_and_the_worker_restarts(link: Tau2Link) -> None:
    with pytest.raises(Tau2Error, match="no task 'nope'"):
        link.call({"op": "reset", "domain": "mock", "task": "nope"})
    with pytest.raises(Tau2Error, match="unknown τ² domain"):
        link.call({"op": "tasks", "domain": "bank"})
    if link.mode == "worker":
        assert link._proc is not None
        link._proc.kill()
        link._proc.wait()
        assert link.call({"op": "ping"}) == "pong"  # a fresh worker
        # a hung worker (stopped): the call times out with a named error, the worker is killed
        os.kill(link._proc.pid, signal.SIGSTOP)
        with pytest.raises(Tau2Error, match="did not answer in time"):
            link.call({"op": "ping"}, timeout=2)
        assert link._proc is None and link.call({"op": "ping"}) == "pong"


def test_ids_and_targets() -> None:
    assert tau2_domain("tau2/airline") == "airline" and tau2_domain("tau2-mock-v0") == "mock"
    assert tau2_domain("trip-planning-v0") is None and tau2_domain("tau2/") is None
    odd = "[mobile_data_issue]airplane_mode_on|data_mode_off"
    safe = envgym_task_id(odd)
    assert safe != odd and safe == envgym_task_id(odd) and "|" not in safe
    assert envgym_task_id("12") == "12"


def _scripted_agent_episode(
    env: Tau2Env, seed: int, user: object
) -> tuple[list[dict], float, dict]:
    env.reset(seed=seed, options={"task": "create_task_1", "user": user})
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "a1", "type": "function", "function": {
        "name": "create_task", "arguments": json.dumps({"user_id": "user_1", "title": "Important Meeting"})}}]}  # fmt: skip
    result = env.step(call)
    for text in ("The task 'Important Meeting' is created. Anything else?", "Have a good day."):
        if result[2] or result[3]:
            break
        result = env.step({"role": "assistant", "content": text})
    if not (result[2] or result[3]):
        result = env.step({"role": "assistant", "content": "###STOP###"})
    return copy.deepcopy(env.history), result[1], result[4]


@pytest.fixture(scope="module")
def smol_user() -> PolicyUser:
    # sampled (temperature 1), so only the per-turn seeds make two runs agree; short turns keep CI cheap
    return PolicyUser("smollm2", params=SamplingParams(temperature=1.0, max_tokens=40))


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_embedded_user_is_seeded_and_replays_exactly(link: Tau2Link, smol_user: PolicyUser) -> None:
    env = Tau2Env("mock", link=link)
    first, reward, info = _scripted_agent_episode(env, 7, smol_user)
    turns = info["report"]["user_turns"]
    assert turns and all(isinstance(t["seed"], int) for t in turns)
    again, reward2, info2 = _scripted_agent_episode(env, 7, smol_user)  # sampled, same seeds
    assert again == first and info2["report"]["user_turns"] == turns and reward2 == reward
    replayed, reward3, info3 = _scripted_agent_episode(env, 7, ReplayUser(turns))
    assert replayed == first and reward3 == reward
    assert info3["report"]["components"] == info["report"]["components"]
    # a replay asked for a turn it never recorded says so
    with pytest.raises(UserTurnError, match="replay diverged"):
        _scripted_agent_episode(env, 8, ReplayUser(turns))


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_eval_embedded_model_on_mock_end_to_end_and_replays(tmp_path: Path) -> None:
    from envgym.evaluate import EvalConfig, evaluate
    from envgym.policy import SamplingParams
    from envgym.rollout import RolloutBudget
    from envgym.store import Store

    config = EvalConfig(k=1, limit=1, concurrency=1, seed=3, sandbox="inprocess",
                        params=SamplingParams(temperature=0.7, max_tokens=32),
                        budget=RolloutBudget(max_turns=2, max_tokens=512, max_seconds=300))  # fmt: skip
    runs = []
    for name in ("a", "b"):
        store = Store(f"sqlite:///{tmp_path / name}.db")
        try:
            runs.append(evaluate("tau2-mock-v0", "smollm2", config, store=store))
        finally:
            store.close()
    a, b = runs
    assert a.summary.episodes == 1 and 1 in a.summary.pass_hat_k
    timing = {"duration_s"}
    first, second = (
        {k: v for k, v in e.to_dict().items() if k not in timing}
        for e in (a.episodes[0], b.episodes[0])
    )
    assert first == second  # the same seeds: the same agent and user turns, the same outcome
    users = [m for m in first["messages"] if m["role"] == "user"]
    assert users and first["turns"] >= 1


@pytest.mark.timeout(300)
def test_registry_and_check_entry(capsys: pytest.CaptureFixture[str]) -> None:
    import tomllib

    from envgym import registry
    from envgym.bundle import load_bundle
    from envgym.envs.tau2.check_cli import tau2_check_main
    from envgym.envs.tau2.registration import register_envs

    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert (
        pyproject["project"]["entry-points"]["envgym.envs"]["tau2"]
        == "envgym.envs.tau2.registration:register_envs"
    )
    register_envs()  # as discovery does (a shared checkout's installed metadata may be stale)
    env = registry.make("tau2-mock-v0", sandbox="bwrap", context="keep-all")  # eval's options pass
    try:
        assert isinstance(env, Tau2Env) and env.domain == "mock"
    finally:
        env.close()
    bundle = load_bundle(registry.resolve_bundle("tau2-mock-v0"))
    assert [t.metadata["tau2_id"] for t in bundle.tasks] == [t["id"] for t in domain_tasks("mock")]
    # `envgym check tau2/mock` reaches the family's check through the registry's handler
    handler = registry.check_handler("tau2/mock")
    assert handler is not None and handler.name == "tau2"
    assert registry.check_handler("trip-planning-v0") is None
    assert tau2_check_main("tau2/mock", as_json=True, limit=2) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["domain"] == "mock" and out["tasks"] == 2 and out["passed"]
    with pytest.raises(ValueError, match="names no τ² domain"):
        tau2_check_main("trip-planning-v0")


class _UserServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint playing τ²'s user: a device tool call, then a sentence, then stop.

    The user model is the part that cannot run cheaply here; the HTTP client, the request the env
    sends (seed, tools, the flipped conversation) and everything after it are real.
    """

    replies = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "u1",
                    "type": "function",
                    "function": {"name": "check_status_bar", "arguments": "{}"},
                }
            ],
        },
        {"role": "assistant", "content": "My phone shows no signal."},
        {"role": "assistant", "content": "Thanks. ###STOP###"},
    ]

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        seen = self.server.requests  # type: ignore[attr-defined]
        seen.append(body)
        message = self.replies[min(len(seen) - 1, len(self.replies) - 1)]
        data = json.dumps({"choices": [{"index": 0, "message": message,
                                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.mark.timeout(180)
def test_openai_compatible_user_gets_seeds_and_runs_device_tools(link: Tau2Link) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _UserServer)
    httpd.requests = []  # type: ignore[attr-defined]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    env = Tau2Env(
        "telecom", link=link, user=f"http://127.0.0.1:{httpd.server_address[1]}/v1#user-model"
    )
    try:
        task = next(
            t
            for t in domain_tasks("telecom")
            if any(a["requestor"] == "user" for a in t["actions"])
        )
        obs, _ = env.reset(seed=5, options={"task": task["id"]})
        assert obs["messages"][-1] == {"role": "user", "content": "My phone shows no signal."}
        result = env.step({"role": "assistant", "content": "Please restart your phone."})
    finally:
        env.close()
        httpd.shutdown()
        httpd.server_close()
    requests = httpd.requests  # type: ignore[attr-defined]
    assert [r["seed"] for r in requests] == [user_seed(5, i) for i in range(3)]
    assert all(r["model"] == "user-model" and r["tools"] for r in requests)
    assert (
        requests[0]["messages"][0]["role"] == "system"
        and "<scenario>" in requests[0]["messages"][0]["content"]
    )
    assert requests[0]["messages"][1] == {
        "role": "user",
        "content": "Hi! How can I help you today?",
    }
    report = result[4]["report"]
    assert result[2] and report["termination"] == "user_stop"
    device = [r for r in report["tool_results"] if r["requestor"] == "user"]
    assert [r["name"] for r in device] == ["check_status_bar"] and not device[0]["error"]
    assert "u1" in json.dumps(requests[1]["messages"])  # the user saw its own tool's result


@pytest.mark.timeout(120)
def test_context_options_shape_the_prompt_and_a_full_window_truncates(link: Tau2Link) -> None:
    """`envgym eval --context/--context-window` reach τ² episodes as they reach bundle envs."""
    user = [{"seed": None, "content": "Please create a task 'Important Meeting' for user_1.", "calls": []},
            {"seed": None, "content": "Thanks.", "calls": []}]  # fmt: skip
    thought = {
        "role": "assistant",
        "content": "Noted.",
        "reasoning_content": "the user wants a task",
    }
    env = Tau2Env("mock", link=link, context="discard-reasoning")
    try:
        env.reset(seed=1, options={"task": "create_task_1", "user": ReplayUser(user)})
        obs, _, done, truncated, info = env.step(thought)
        assert not (done or truncated)
        assert any(m.get("reasoning_content") for m in env.history)  # the trajectory keeps it
        assert not any(m.get("reasoning_content") for m in obs["messages"])  # the prompt does not
        assert info["context_dropped"] and "context_compactions" in info
    finally:
        env.close()
    env = Tau2Env("mock", link=link, context_window=50)  # smaller than the system prompt alone
    try:
        env.reset(seed=1, options={"task": "create_task_1", "user": ReplayUser(user)})
        _, reward, done, truncated, info = env.step({"role": "assistant", "content": "Noted."})
        assert truncated and not done and info["truncated_by"] == "context_window" and reward == 0.0
        assert info["report"]["termination"] == "max_steps"
    finally:
        env.close()
