"""``code-interpreter-v0`` end to end: scripted agents, the rollout engine, the seed's prompts,
the execution cap, timeouts through the env, and the embedded model."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envgym import registry
from envgym.agents import ScriptedAgent, run_episode
from envgym.core import INFO_KEYS
from envgym.envs.code_interpreter.build import build_bundle
from envgym.envs.code_interpreter.env import CodeInterpreterEnv
from envgym.envs.code_interpreter.prompts import PLAIN, THINKING
from envgym.envs.code_interpreter.reasoning import bundle_module
from envgym.envs.code_interpreter.registration import register_envs
from envgym.rollout import AgentPolicy, EpisodeResult, RolloutBudget, RolloutEngine, specs_for
from envgym.tools.python_kernel import KernelConfig, SyncKernelPool

pytestmark = pytest.mark.timeout(180)
TASKS = ("math-gcd-d1-0", "logic-game-of-life-d1-0", "data-orders-in-region-0")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bundle(
        tmp_path_factory.mktemp("ci") / "bundle", per_generator=1, difficulties=(1,)
    )


@pytest.fixture(scope="module")
def pool() -> Iterator[SyncKernelPool]:
    with SyncKernelPool(KernelConfig(), warm=1, max_kernels=6) as p:
        yield p


@pytest.fixture
def env(bundle: Path, pool: SyncKernelPool) -> Iterator[CodeInterpreterEnv]:
    e = CodeInterpreterEnv(bundle, pool=pool)
    yield e
    e.close()


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


@pytest.mark.parametrize("task", TASKS)
def test_gold_replay_runs_through_the_kernel_and_passes(env: CodeInterpreterEnv, task: str) -> None:
    obs, info = env.reset(options={"task": task})
    assert set(INFO_KEYS) <= set(info) and info["python"]["executions"] == 0
    assert obs["messages"][0]["content"].startswith(PLAIN.format(timeout=120.0))
    assert [t["function"]["name"] for t in obs["tools"]] == ["python", "submit_answer"]
    calls = env.gold_calls()
    assert [name for name, _ in calls] == ["python", "submit_answer"]
    agent = ScriptedAgent(calls)
    obs, reward, terminated, truncated, info = env.step(agent.act(obs))
    assert obs["messages"][-1]["content"].strip() == calls[1][1]["answer"]  # the kernel printed it
    obs, reward, terminated, truncated, info = env.step(agent.act(obs))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["python"] == {
        "executions": 1,
        "errors": 0,
        "timeouts": 0,
        "restarts": 0,
        "limit_hits": 0,
    }
    assert info["report"]["checks"][-1] == {"name": "answer_correct", "passed": True, "detail": ""}


def test_data_files_are_in_the_working_directory_and_episodes_do_not_share_state(
    env: CodeInterpreterEnv,
) -> None:
    obs, _ = env.reset(options={"task": "data-orders-in-region-0"})
    code = "import os, pandas as pd\nleft = 'x'\nprint(sorted(os.listdir()), len(pd.read_csv('sales.csv')))"
    obs, *_ = env.step(_call(1, "python", {"code": code}))
    assert obs["messages"][-1]["content"] == "['sales.csv', 'staff.sqlite', 'weather.csv'] 240\n"
    env.reset(options={"task": "math-gcd-d1-0"})
    obs, *_ = env.step(_call(2, "python", {"code": "'left' in dir()"}))
    assert obs["messages"][-1]["content"] == "False\n"


def test_a_wrong_answer_gets_zero_and_a_reason(env: CodeInterpreterEnv) -> None:
    env.reset(options={"task": "math-gcd-d1-0"})
    _, reward, terminated, _, info = env.step(_call(1, "submit_answer", {"answer": "not a number"}))
    assert (reward, terminated) == (0.0, True)
    assert info["report"]["checks"][-1]["name"] == "answer_parses"
    assert not info["report"]["checks"][-1]["passed"]


def test_raw_text_actions_and_timeouts_reach_the_agent(bundle: Path, pool: SyncKernelPool) -> None:
    env = CodeInterpreterEnv(bundle, pool=pool, timeout_s=1.0)
    try:
        env.reset(options={"task": "math-gcd-d1-0"})
        raw = '<tool_call>\n{"name": "python", "arguments": {"code": "while True:\\n    pass"}}\n</tool_call>'
        obs, reward, terminated, truncated, info = env.step(raw)
        assert obs["messages"][-1]["content"] == (
            "Error: python failed (timeout): Execution timed out after 1 seconds and was interrupted; "
            "the kernel's variables are kept."
        )
        assert info["errors"] == {"timeout": 1} and info["python"]["timeouts"] == 1
        assert not (terminated or truncated)
    finally:
        env.close()


def test_thinking_prompt_final_answers_and_the_20_execution_cap(
    bundle: Path, pool: SyncKernelPool
) -> None:
    env = CodeInterpreterEnv(bundle, pool=pool, prompt="thinking", answer="final")
    try:
        obs, _ = env.reset(options={"task": "math-gcd-d1-0"})
        assert obs["messages"][0]["content"] == THINKING.format(max_executions=20) + (
            "\n\nGive the final answer at the end of your reply as \\boxed{answer}."
        )
        assert [t["function"]["name"] for t in obs["tools"]] == ["python"]
        answer = env.gold_calls()[-1][1]["answer"]
        for i in range(21):
            obs, *_ = env.step(_call(i, "python", {"code": f"{i} + 1"}))
        assert obs["messages"][-1]["content"] == (
            "Not executed: the limit of 20 code executions for this task is reached. Give your final answer now."
        )
        final = {
            "role": "assistant",
            "reasoning_content": "computed",
            "content": f"The GCD is $\\boxed{{{answer}}}$.",
        }
        _, reward, terminated, _, info = env.step(final)
        assert (reward, terminated) == (1.0, True)
        assert info["python"]["executions"] == 20 and info["python"]["limit_hits"] == 1
    finally:
        env.close()


def test_registration_and_bad_arguments(bundle: Path, pool: SyncKernelPool) -> None:
    register_envs()
    ids = {s.id for s in registry.specs()}
    assert {
        "code-interpreter-v0",
        "code-interpreter-math-v0",
        "code-interpreter-logic-v0",
        "code-interpreter-data-v0",
    } <= ids
    env = registry.make("code-interpreter-v0", bundle=bundle, pool=pool, difficulties=(1,))
    try:
        agent = ScriptedAgent(
            [("python", {"code": "print(2 + 2)"}), ("submit_answer", {"answer": "-1"})]
        )
        result = run_episode(env, agent, task="math-gcd-d1-0")
        assert (result.tool_calls, result.terminated, result.reward) == (2, True, 0.0)
    finally:
        env.close()
    with pytest.raises(
        ValueError, match="unknown prompt 'socratic'; choose one of plain, thinking"
    ):
        CodeInterpreterEnv(bundle, pool=pool, prompt="socratic")
    with pytest.raises(ValueError, match="answer must be 'submit' or 'final'"):
        CodeInterpreterEnv(bundle, pool=pool, answer="shout")
    with pytest.raises(ValueError, match=r"no task of difficulty \[9\]"):
        CodeInterpreterEnv(bundle, pool=pool, difficulties=(9,))


def test_gold_agents_through_the_rollout_engine(bundle: Path, pool: SyncKernelPool) -> None:
    gold: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    probe = CodeInterpreterEnv(bundle, pool=pool)
    try:
        for task in TASKS:
            probe.reset(options={"task": task})
            gold[task] = probe.gold_calls()
    finally:
        probe.close()
    policy = AgentPolicy("gold", lambda task, sample: ScriptedAgent(list(gold[task])))

    async def main() -> list[EpisodeResult]:
        engine = RolloutEngine.local(
            policy, functools.partial(CodeInterpreterEnv, bundle, pool=pool), concurrency=2
        )
        async with engine, contextlib.aclosing(engine.run(specs_for(TASKS, 2))) as stream:
            return [r async for r in stream]

    results = asyncio.run(main())
    assert [r.error_message for r in results if r.error] == []
    assert sorted((r.task_id, r.reward, r.error) for r in results) == sorted(
        (t, 1.0, None) for t in TASKS for _ in range(2)
    )


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_episodes_with_the_embedded_model(bundle: Path, pool: SyncKernelPool) -> None:
    from envgym.models.local import LocalPolicy
    from envgym.policy import SamplingParams

    policy = LocalPolicy.from_pretrained("smollm2")

    async def main() -> list[EpisodeResult]:
        engine = RolloutEngine.local(
            policy,
            functools.partial(CodeInterpreterEnv, bundle, pool=pool, timeout_s=10.0),
            concurrency=2,
            params=SamplingParams(temperature=0.8, max_tokens=48, seed=0),
            budget=RolloutBudget(max_turns=3),
        )
        async with (
            engine,
            contextlib.aclosing(engine.run(specs_for(TASKS[:2], 1, seed=1))) as stream,
        ):
            return [r async for r in stream]

    try:
        results = asyncio.run(main())
    finally:
        asyncio.run(policy.aclose())
    assert len(results) == 2
    tasks = {t["id"]: t for t in map(json.loads, (bundle / "tasks.jsonl").read_text().splitlines())}
    verifier = bundle_module("verifier")
    for r in results:
        assert r.error is None, r.error_message
        assert 1 <= r.turns <= 3
        # The reward is the verdict on what the model submitted, recomputed here on the host
        # from the transcript (no submission: 0.0), and it agrees with the env's report.
        submitted = [
            json.loads(call["function"]["arguments"])
            for m in r.messages
            if m["role"] == "assistant"
            for call in m.get("tool_calls") or []
            if call["function"]["name"] == "submit_answer"
        ]
        expected = 0.0
        if (
            submitted
            and r.terminated
            and isinstance(submitted[-1], dict)
            and "answer" in submitted[-1]
        ):
            report = verifier.verify_answer(
                {"answer": str(submitted[-1]["answer"])}, tasks[r.task_id]
            )
            expected = float(all(c["passed"] for c in report["checks"]))
        assert r.reward == expected, (r.task_id, submitted, r.report)
        if r.report is not None:
            assert r.reward == float(all(c["passed"] for c in r.report["checks"]))
        for segment in r.record.segments:
            segment.check()
