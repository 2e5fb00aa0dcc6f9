"""Evaluations end to end: resumable runs keyed by content hashes, the CLI, bad input."""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from test_rollout_doubles import ScriptedPolicy

from envgym import registry
from envgym.bundle import load_bundle
from envgym.bundle_env import BundleEnv
from envgym.evaluate import EvalConfig, EvalError, ModelRef, ModelSpecError, evaluate, model_ref
from envgym.policy import SamplingParams
from envgym.rollout import RolloutBudget
from envgym.store import Store

REPO = Path(__file__).resolve().parents[1]
DOUBLE = ModelRef("scripted-double", "test", "double:v1")
# Task-independent: two lookups and a wrong (well-formed) plan, so every episode ends
# verified and failed in three turns.
WRONG_PLAN = [
    {
        "time": "2025-10-05",
        "city": "Beijing",
        "hotel": "h",
        "afternoon_restaurant": "r",
        "afternoon_attraction": "a",
        "evening_restaurant": "e",
    }
]
SCRIPT = [
    ("get_all_cities", {}),
    ("get_all_cities", {}),
    ("submit_result", {"answer_text": json.dumps(WRONG_PLAN)}),
]


def double(**kw: object) -> ScriptedPolicy:
    return ScriptedPolicy(lambda task, sample: SCRIPT, **kw)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'eval.db'}")


def test_an_evaluation_resumes_and_grows_without_redoing_episodes(store: Store) -> None:
    config = EvalConfig(k=2, limit=2, concurrency=2)
    first = evaluate("trip-planning-v0", DOUBLE, config, store=store, policy=double())
    assert first.ran == 4 and first.summary.episodes == 4 and first.summary.tasks == 2
    assert all(
        e.terminated and e.reward == 0.0 and e.turns == 3 and e.error is None
        for e in first.episodes
    )
    assert first.summary.pass_at_k[2].value == 0.0 and first.summary.tokens_per_episode == 12.0

    policy = double()
    again = evaluate("trip-planning-v0", DOUBLE, config, store=store, policy=policy)
    assert again.ran == 0 and policy.calls == [] and again.key == first.key
    assert again.episodes == first.episodes

    more = evaluate(
        "trip-planning-v0",
        DOUBLE,
        replace(config, samples=3, limit=3),
        store=store,
        policy=double(),
    )
    assert more.key == first.key  # n, k and --limit select episodes; they are not part of the key
    assert more.ran == 3 * 3 - 4 and more.summary.episodes == 9
    assert store.evaluation(first.key).summary is not None


def test_the_key_changes_with_what_changes_results(store: Store) -> None:
    base = EvalConfig(k=1, limit=1)
    key = evaluate("trip-planning-v0", DOUBLE, base, store=store, policy=double()).key
    hotter = replace(base, params=SamplingParams(temperature=1.0))
    assert evaluate("trip-planning-v0", DOUBLE, hotter, store=store, policy=double()).key != key
    other_model = ModelRef("scripted-double", "test", "double:v2")
    assert evaluate("trip-planning-v0", other_model, base, store=store, policy=double()).key != key
    assert (
        evaluate(
            "trip-planning-v0", DOUBLE, replace(base, concurrency=3), store=store, policy=double()
        ).key
        == key
    )


def test_errored_episodes_are_stored_listed_and_retried_on_request(store: Store) -> None:
    config = EvalConfig(k=1, limit=3)
    broken = double(fail=lambda session, turn: "policy" if session.startswith("trip-001") else None)
    run = evaluate("trip-planning-v0", DOUBLE, config, store=store, policy=broken)
    assert run.summary.errored == 1 and run.summary.errors_by_kind == {"policy": 1}
    assert run.summary.excluded == {1: 1} and run.summary.tasks == 3
    [bad] = [e for e in run.episodes if e.error]
    assert bad.task_id == "trip-001-d1" and "HTTP 500" in bad.error_message

    assert evaluate("trip-planning-v0", DOUBLE, config, store=store, policy=double()).ran == 0
    fixed = evaluate(
        "trip-planning-v0", DOUBLE, replace(config, retry_errors=True), store=store, policy=double()
    )
    assert fixed.ran == 1 and fixed.summary.errored == 0 and fixed.summary.excluded == {1: 0}


def test_bad_configs_and_targets_are_named(store: Store, tmp_path: Path) -> None:
    with pytest.raises(EvalError, match=r"samples per task \(2\) must be ≥ k \(3\)"):
        EvalConfig(k=3, samples=2)
    with pytest.raises(EvalError, match="k must be ≥ 1"):
        EvalConfig(k=0)
    with pytest.raises(EvalError, match="no-such-env"):
        evaluate("no-such-env-v0", DOUBLE, EvalConfig(), store=store, policy=double())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_text("{")
    with pytest.raises(EvalError, match="bad bundle .*tasks.jsonl: required file is missing"):
        evaluate(str(tmp_path / "b"), DOUBLE, EvalConfig(), store=store, policy=double())
    with pytest.raises(ModelSpecError, match="unknown --model 'gpt-17'"):
        model_ref("gpt-17")
    (tmp_path / "empty-model").mkdir()
    with pytest.raises(ModelSpecError, match="holds no weights"):
        model_ref(str(tmp_path / "empty-model"))


def test_model_refs_fingerprint_content() -> None:
    assert model_ref("gold") == ModelRef("gold", "agent", "agent:gold:v1")
    url = model_ref("http://127.0.0.1:8000/v1#smol")
    assert url.kind == "http" and url.fingerprint.startswith("http:")
    smol = model_ref("smollm2")
    assert (
        smol.kind == "embedded"
        and smol.fingerprint.startswith("sha256:")
        and len(smol.fingerprint) == 71
    )


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envgym.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def test_cli_eval_prints_json_and_writes_the_report(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    done = cli(
        "eval",
        "trip-planning-v0",
        "--model",
        "gold",
        "-k",
        "2",
        "--limit",
        "2",
        "--db",
        db,
        "--json",
        "--html",
        str(tmp_path / "report"),
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # exactly one JSON object on stdout
    assert summary["pass_at_k"]["1"]["value"] == 1.0 and summary["pass_hat_k"]["2"]["value"] == 1.0
    assert summary["episodes"] == 4 and summary["ran"] == 4 and summary["errored"] == 0
    # 4/4 over 2 tasks: the clustered Wilson interval at n_eff = 2 tasks, [2/(2 + z²), 1], not
    # the point [1, 1] a bootstrap over tasks gave.
    z2 = 1.959963984540054**2
    at1 = summary["pass_at_k"]["1"]
    assert at1["method"] == "wilson-clustered" and at1["n_eff"] == 2.0
    assert (at1["low"], at1["high"]) == (pytest.approx(2 / (2 + z2)), 1.0)
    assert (tmp_path / "report" / "index.html").is_file() and (
        tmp_path / "report" / "data.js"
    ).is_file()
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [t["function"]["name"] for t in report["tools"]][:2] == [
        "get_all_cities",
        "get_all_hotels_by_city",
    ]  # the tools the model was given; the gold agent has no tokenizer, so no prompt text
    assert report["decoded"] is False and report["episodes"][0]["prompt_text"] is None
    table = cli(
        "eval", "trip-planning-v0", "--model", "gold", "-k", "2", "--limit", "2", "--db", db
    )
    assert (
        table.returncode == 0
        and "pass^2" in table.stdout
        and "0 run now, 4 from the store" in table.stdout
        and "[0.342, 1.000]" in table.stdout
        and "Wilson, clustered by task: n_eff 2" in table.stdout
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-17"], "unknown --model 'gpt-17'"),
        (["--model", "gold", "-k", "4", "-n", "2"], "samples per task (2) must be ≥ k (4)"),
        (["--model", "gold", "--db", "nonsense"], "not a database URL"),
        (["--model", "gold", "--temperature", "-1"], "temperature must be ≥ 0"),
    ],
)
def test_cli_bad_input_exits_2_with_the_reason(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = cli("eval", "trip-planning-v0", *args)
    assert done.returncode == 2
    assert message in " ".join(done.stderr.split())


def test_cli_unknown_env_exits_2(tmp_path: Path) -> None:
    done = cli("eval", "nope-v0", "--model", "gold", "--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert done.returncode == 2 and "nope" in done.stderr


def test_budget_flags_reach_the_engine(store: Store) -> None:
    run = evaluate(
        "trip-planning-v0",
        "gold",
        EvalConfig(k=1, limit=1, budget=RolloutBudget(max_turns=3)),
        store=store,
    )
    [e] = run.episodes
    assert (e.truncated_by, e.turns, e.passed) == ("max_turns", 3, False)
    assert run.summary.truncations == {"max_turns": 1}


# -- evaluation builds what envgym.make builds -------------------------------------------------

MARK = "You are evaluated in the marked family."


class _MarkedEnv(BundleEnv):
    """A registered family's own env class over a bundle: its own system prompt (as
    ``CodeInterpreterEnv`` has its own prompt and kernel-backed python tool)."""

    def __init__(self, bundle: Path, **kwargs: object) -> None:
        loaded = load_bundle(bundle)
        tasks = tuple(dataclasses.replace(t, system_prompt=MARK) for t in loaded.tasks)
        super().__init__(dataclasses.replace(loaded, tasks=tasks), **kwargs)  # type: ignore[arg-type]


@dataclasses.dataclass
class _Watching(ScriptedPolicy):
    """The scripted double, also noting the system prompt each session saw."""

    systems: dict[str, str] = dataclasses.field(default_factory=dict)

    async def act(self, session, messages, tools, params):  # type: ignore[no-untyped-def]
        self.systems.setdefault(session, messages[0]["content"])
        return await super().act(session, messages, tools, params)


@pytest.fixture
def marked_env() -> Iterator[str]:
    registry.discover()
    trip = registry.spec("trip-planning-v0").bundle_dir
    assert trip is not None
    registry.register(
        "eval-marked-v0", lambda **kw: _MarkedEnv(trip(), **kw), bundle_dir=trip, override=True
    )
    try:
        yield "eval-marked-v0"
    finally:
        registry._registry.pop("eval-marked-v0", None)


def test_evaluation_runs_the_registered_env_class_not_a_plain_bundle_env(
    store: Store, marked_env: str
) -> None:
    policy = _Watching(lambda task, sample: SCRIPT)
    run = evaluate(
        marked_env, DOUBLE, EvalConfig(k=1, limit=2, concurrency=2), store=store, policy=policy
    )
    assert run.ran == 2 and all(e.error is None and e.terminated for e in run.episodes)
    assert sorted(policy.systems.values()) == [MARK, MARK]  # a plain BundleEnv says something else
    assert all(e.messages[0]["content"] == MARK for e in run.episodes)
    # What builds the envs is part of the key: the same bundle as a bare directory is another run.
    bare = evaluate(
        str(registry.resolve_bundle(marked_env)),
        DOUBLE,
        EvalConfig(k=1, limit=2),
        store=store,
        policy=double(),
    )
    assert bare.key != run.key and bare.ran == 2
    assert all(e.messages[0]["content"] != MARK for e in bare.episodes)


def test_env_factory_builds_what_make_builds(marked_env: str) -> None:
    factory = registry.env_factory(marked_env, sandbox="inprocess")
    env = factory()
    try:
        assert (
            type(env) is type(made := registry.make(marked_env, sandbox="inprocess")) is _MarkedEnv
        )
        made.close()
    finally:
        env.close()
    with pytest.raises(
        KeyError, match="no environment 'eval-markd-v0'.*did you mean eval-marked-v0"
    ):
        registry.env_factory("eval-markd-v0")
    assert pickle.loads(pickle.dumps(registry.env_factory("trip-planning-v0"))).args == (
        "trip-planning-v0",
    )


@pytest.mark.heavy
@pytest.mark.timeout(300)
def test_eval_of_code_interpreter_runs_its_kernel_env(store: Store) -> None:
    """Evaluation builds what envgym.make builds, on the real family: the episodes have
    CodeInterpreterEnv's system prompt (not BundleEnv's generic one), and the gold answer passes
    through its tools."""
    env = registry.make("code-interpreter-v0", sandbox="inprocess")
    try:
        assert type(env).__name__ == "CodeInterpreterEnv"
        expected = env.bundle.tasks[0].system_prompt
        assert expected
    finally:
        env.close()
    run = evaluate("code-interpreter-v0", "gold", EvalConfig(k=1, limit=1), store=store)
    [episode] = run.episodes
    assert episode.passed and episode.messages[0]["content"] == expected
    assert episode.tool_calls >= 1 and run.summary.errored == 0
