"""The rollout engine against the real trip-planning bundle in bubblewrap sandboxes, driven by
the scripted policy double (tests/test_rollout_doubles.py)."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import functools
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_rollout_doubles import ScriptedPolicy

from envgym import registry
from envgym.bundle_env import BundleEnv
from envgym.context import ContextManager
from envgym.models.kept import encode_kept
from envgym.policy import SamplingParams, Turn
from envgym.record import Segment, TurnInfo
from envgym.rollout import (
    AgentPolicy,
    EpisodeResult,
    EpisodeSpec,
    RecordBuilder,
    RecordError,
    RolloutBudget,
    RolloutEngine,
    ThreadEnvPool,
    rollout,
    specs_for,
)

TASKS = ("trip-001-d1", "hangzhou-3day", "trip-002-d2")


@pytest.fixture(scope="module")
def bundle_dir() -> Path:
    return registry.resolve_bundle("trip-planning-v0")


@pytest.fixture(scope="module")
def gold(bundle_dir: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    env = BundleEnv(bundle_dir)
    try:
        out = {}
        for task in TASKS:
            env.reset(options={"task": task})
            out[task] = env.gold_calls()
        return out
    finally:
        env.close()


def children() -> set[int]:
    me = str(os.getpid())
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[1] == me:
                        pids.add(int(entry))
            except (OSError, IndexError):
                pass
    return pids


def fd_targets(fds: list[int] | None = None) -> set[str]:
    """What the given (default: all) open fds of this process point at, e.g. ``pipe:[8812]``.

    A pipe's or a deleted temporary file's target names its inode, so it identifies one
    object: a leak check by target is not fooled by fds other threads open meanwhile.
    """
    out = set()
    for n in fds if fds is not None else [int(n) for n in os.listdir("/proc/self/fd")]:
        try:
            out.add(os.readlink(f"/proc/self/fd/{n}"))
        except OSError:
            pass
    return out


def run(
    policy: Any,
    bundle_dir: Path,
    specs: list[EpisodeSpec],
    *,
    concurrency: int = 3,
    env_cls: type = BundleEnv,
    **kw: Any,
) -> list[EpisodeResult]:
    return rollout(
        policy, functools.partial(env_cls, bundle_dir), specs, concurrency=concurrency, **kw
    )


# -- the per-token record ---------------------------------------------------------------------


def test_record_builder_extends_one_segment_then_starts_another() -> None:
    b = RecordBuilder(model="m", policy_version=7)
    b.add(Turn(text="", prompt_ids=[1, 2], token_ids=[5, 6], logprobs=[-0.5, -0.25]))
    b.add(Turn(text="", prompt_ids=[1, 2, 5, 6, 9], token_ids=[7], logprobs=[-1.0], kept=[[7, 8]]))
    b.add(Turn(text="", prompt_ids=[1, 2, 9], token_ids=[4], logprobs=[-2.0]))  # history changed
    b.add(Turn(text="no ids"))  # an HTTP server without token ids
    record = b.finish(1.0, {"budget": 1.0})
    first, second = record.segments
    nan = float("nan")
    assert first == Segment(
        token_ids=[1, 2, 5, 6, 9, 7],
        loss_mask=[0, 0, 1, 1, 0, 1],
        sampled_logprobs=[0.0, 0.0, -0.5, -0.25, 0.0, -1.0],  # a plain Turn's kind
        full_logprobs=[0.0, 0.0, nan, nan, 0.0, nan],  # not reported
        # a plain Turn without kept sets: unknown (record v2), not "not truncated"
        kept=[None, None, "unknown", "unknown", None, encode_kept([7, 8])],
        routes=None,
        turns=[(2, 4), (5, 6)],
        turn_info=[TurnInfo(finish_reason="stop")] * 2,
    )
    assert (
        second.token_ids == [1, 2, 9, 4]
        and second.loss_mask == [0, 0, 0, 1]
        and second.turns == [(3, 4)]
    )
    assert (record.policy_version, record.model, record.reward, record.reward_components) == (
        7,
        "m",
        1.0,
        {"budget": 1.0},
    )
    assert b.untracked_turns == 1 and record.sampled_tokens == 4


def test_record_builder_rejects_mismatched_per_token_data() -> None:
    b = RecordBuilder(model="m", policy_version=0)
    with pytest.raises(RecordError, match="2 sampled ids and 1 log-probs"):
        b.add(Turn(text="", prompt_ids=[1], token_ids=[2, 3], logprobs=[-1.0]))


# -- episodes end to end ----------------------------------------------------------------------


def test_gold_script_solves_tasks_with_one_segment_per_episode(
    bundle_dir: Path, gold: dict
) -> None:
    policy = ScriptedPolicy(lambda task, sample: gold[task], tokens_per_turn=3)
    results = run(policy, bundle_dir, specs_for(TASKS, 2))
    assert sorted((r.task_id, r.sample) for r in results) == sorted(
        (t, s) for t in TASKS for s in range(2)
    )
    for r in results:
        n_calls = len(gold[r.task_id])
        assert (r.reward, r.passed, r.terminated, r.error) == (1.0, True, True, None)
        assert r.turns == r.tool_calls == n_calls
        assert r.reward_components and all(v == 1.0 for v in r.reward_components.values())
        assert (
            r.record.reward == 1.0
            and r.record.policy_version == 3
            and r.record.model == "scripted-double"
        )
        [segment] = r.record.segments  # every prompt extended the previous one
        segment.check()
        assert len(segment.turns) == n_calls and r.sampled_tokens == 3 * n_calls == sum(
            segment.loss_mask
        )
        assert r.messages[0]["role"] == "system" and r.messages[-1]["role"] == "tool"
        assert r.report is not None and r.report["checks"]
    assert sorted(policy.ended) == sorted(f"{t}#{s}" for t in TASKS for s in range(2))


def test_thinking_retention_drop_starts_a_new_segment_and_is_recorded(
    bundle_dir: Path, gold: dict
) -> None:
    # A turn without a tool call makes the env nudge with a user-role message.  By default the
    # nudge is not a new user turn (DeepSeek-V3.2 §3.2.1: simulated interactions must not cost
    # the retained reasoning), so the prompt keeps extending: one segment, nothing dropped.
    calls = gold["trip-001-d1"]
    script = [calls[0], "let me think", *calls[1:]]
    [kept] = run(
        ScriptedPolicy(lambda task, sample: script, reasoning="because"),
        bundle_dir,
        [EpisodeSpec("trip-001-d1")],
    )
    assert kept.passed and kept.turns == len(calls) + 1
    assert len(kept.record.segments) == 1 and kept.context_dropped == []
    # When the env's nudges end the turn, retention drops the earlier reasoning, the prompt
    # stops extending, and the record starts a new segment.
    strict = functools.partial(BundleEnv, context=ContextManager(env_messages_end_turn=True))
    policy = ScriptedPolicy(lambda task, sample: script, reasoning="because")
    [r] = run(policy, bundle_dir, [EpisodeSpec("trip-001-d1")], env_cls=strict)  # type: ignore[arg-type]
    assert r.passed and r.turns == len(calls) + 1
    assert len(r.record.segments) == 2
    assert [d["what"] for d in r.context_dropped] == ["reasoning", "reasoning"]
    assert {d["index"] for d in r.context_dropped} == {
        2,
        4,
    }  # the two assistant turns before the nudge
    assert all(d["turn"] == 2 for d in r.context_dropped)


def test_results_stream_while_a_slow_episode_is_still_running(bundle_dir: Path, gold: dict) -> None:
    gate_holder: list[asyncio.Event] = []

    async def main() -> list[str]:
        gate = asyncio.Event()
        gate_holder.append(gate)
        policy = ScriptedPolicy(
            lambda task, sample: gold[task], gate=gate, gated=frozenset({"hangzhou-3day#0"})
        )
        order = []
        async with RolloutEngine.local(
            policy, functools.partial(BundleEnv, bundle_dir), concurrency=3
        ) as engine:
            async with contextlib.aclosing(engine.run(specs_for(TASKS, 1))) as stream:
                async for result in stream:
                    order.append(result.task_id)
                    if len(order) == 2:
                        gate.set()  # the slow episode may only finish after two others arrived
        return order

    order = asyncio.run(main())
    assert order[2] == "hangzhou-3day" and sorted(order[:2]) == ["trip-001-d1", "trip-002-d2"]


class _MeetingPolicy(ScriptedPolicy):
    """Each session's first turn waits (bounded) until two sessions are in ``act`` at once, so
    reaching the bound does not depend on how the scheduler interleaves a loaded machine."""

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        if session not in self._state:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            with contextlib.suppress(TimeoutError):
                deadline = time.monotonic() + 5.0
                while self.in_flight < 2 and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            self.in_flight -= 1
        return await super().act(session, messages, tools, params)


def test_concurrency_is_bounded(bundle_dir: Path) -> None:
    policy = _MeetingPolicy(lambda task, sample: [("get_all_cities", {})] * 3 + ["done"])
    results = run(policy, bundle_dir, specs_for(TASKS, 3), concurrency=2)
    assert len(results) == 9 and policy.max_in_flight == 2


def test_budgets_truncate_turns_tokens_and_seconds(bundle_dir: Path) -> None:
    forever = ScriptedPolicy(lambda task, sample: [("get_all_cities", {})] * 50, tokens_per_turn=5)
    [r] = run(forever, bundle_dir, [EpisodeSpec("trip-001-d1")], budget=RolloutBudget(max_turns=4))
    assert (r.truncated, r.truncated_by, r.turns, r.error, r.reward) == (
        True,
        "max_turns",
        4,
        None,
        0.0,
    )

    forever.calls.clear()
    [r] = run(
        forever,
        bundle_dir,
        [EpisodeSpec("trip-001-d1")],
        budget=RolloutBudget(max_tokens=12),
        params=SamplingParams(max_tokens=100),
    )
    assert (r.truncated_by, r.turns, r.sampled_tokens) == ("max_tokens", 3, 12)
    assert [p.max_tokens for _, _, p in forever.calls] == [
        12,
        7,
        2,
    ]  # each turn asks for what is left

    hangs = ScriptedPolicy(
        lambda task, sample: [("get_all_cities", {})] * 50,
        fail=lambda s, turn: "hang" if turn == 1 else None,
    )
    # 5 s: the first turn's reset and tool call must end inside the budget on a loaded machine
    # (at 1 s they did not, and the episode ended as env_timeout instead of by the budget).
    [r] = run(
        hangs, bundle_dir, [EpisodeSpec("trip-001-d1")], budget=RolloutBudget(max_seconds=5.0)
    )
    assert (r.truncated_by, r.turns, r.error) == ("max_seconds", 1, None)
    assert hangs.ended == ["trip-001-d1#0"]


def test_per_turn_seeds_derive_from_task_and_sample(bundle_dir: Path) -> None:
    policy = ScriptedPolicy(lambda task, sample: [("get_all_cities", {}), "done"])
    run(
        policy,
        bundle_dir,
        [EpisodeSpec("trip-001-d1", 0, seed=5), EpisodeSpec("trip-001-d1", 1, seed=5)],
        concurrency=1,
        budget=RolloutBudget(max_turns=2),
    )
    seeds = {(s, t): p.seed for s, t, p in policy.calls}
    assert seeds[("trip-001-d1#0", 0)] == EpisodeSpec("trip-001-d1", 0, 5).turn_seed(0)
    assert len(set(seeds.values())) == 4


@pytest.mark.parametrize(
    ("mode", "kind", "message"),
    [
        ("policy", "policy", "HTTP 500 three times"),
        ("crash", "policy", "the policy raised KeyError"),
        ("not_turn", "policy", "returned dict, not a Turn"),
        ("record", "record", "4 sampled ids and 3 log-probs"),
    ],
)
def test_policy_failures_end_one_episode_not_the_run(
    bundle_dir: Path, gold: dict, mode: str, kind: str, message: str
) -> None:
    policy = ScriptedPolicy(
        lambda task, sample: gold[task],
        fail=lambda s, turn: mode if s == "trip-002-d2#0" and turn == 2 else None,
    )
    results = {r.task_id: r for r in run(policy, bundle_dir, specs_for(TASKS, 1))}
    bad = results.pop("trip-002-d2")
    assert (bad.error, bad.reward, bad.passed, bad.turns) == (kind, 0.0, False, 2)
    assert message in bad.error_message
    assert len(bad.messages) >= 4  # the trajectory up to the failure is kept
    assert all(r.passed for r in results.values())


class ExplodingEnv(BundleEnv):
    """A real env whose step raises (or hangs) on one task, as a broken env would."""

    mode = "raise"

    def step(self, action: Any) -> Any:
        if self.task is not None and self.task.id == "trip-002-d2":
            if self.mode == "hang":
                import time

                time.sleep(3)
            raise RuntimeError("worker pipe closed")
        return super().step(action)


class HangingEnv(ExplodingEnv):
    mode = "hang"


@pytest.mark.parametrize(("env_cls", "kind"), [(ExplodingEnv, "env"), (HangingEnv, "env_timeout")])
def test_env_failures_end_one_episode_and_replace_the_env(
    bundle_dir: Path, gold: dict, env_cls: type, kind: str
) -> None:
    policy = ScriptedPolicy(lambda task, sample: gold[task])
    before = children()
    results = {
        r.task_id: r
        for r in run(
            policy,
            bundle_dir,
            specs_for(TASKS, 1),
            concurrency=1,
            env_cls=env_cls,
            budget=RolloutBudget(max_seconds=1.5),
        )
    }
    assert results["trip-002-d2"].error == kind
    assert results["trip-001-d1"].passed and results["hangzhou-3day"].passed
    assert children() <= before  # the broken env was closed, and so were the others


@pytest.mark.usefixtures("unforked")  # reads the bwrap launch's process
def test_cancelling_the_stream_stops_episodes_and_closes_envs(bundle_dir: Path, gold: dict) -> None:
    kids = children()
    specs = specs_for(TASKS, 2)  # task-major: the first four are trip-001 ×2, hangzhou ×2
    policy = ScriptedPolicy(
        lambda task, sample: gold[task],
        fail=lambda s, turn: "hang" if not s.startswith("trip-001") else None,
        gate=asyncio.Event(),
        gated=frozenset(s.session for s in specs if s.task_id == "trip-001-d1"),
    )

    async def open_gate_once_hangzhou_acts() -> None:
        # trip-001 may finish only once both hanging episodes have their env (a sandbox starts
        # slower than a scripted episode runs on a loaded machine): then four envs are open.
        while len({s for s, _, _ in policy.calls if s.startswith("hangzhou")}) < 2:
            await asyncio.sleep(0.01)
        assert policy.gate is not None
        policy.gate.set()

    workers: list[Any] = []  # the process of every sandbox worker this engine launches
    handles: list[Any] = []
    owned: set[str] = set()  # the pipes and stderr files those workers' handles opened
    opened: list[int] = []  # how many distinct fd targets each launch recorded

    def env() -> BundleEnv:
        made = BundleEnv(bundle_dir)
        launch = made.sandbox._launch

        def recorded(state: Any) -> Any:
            handle = launch(state)
            workers.append(handle.proc)
            handles.append(handle)
            targets = fd_targets([handle.read_fd, handle.write_fd, handle._stderr.fileno()])
            opened.append(len(targets))
            owned.update(targets)
            return handle

        made.sandbox._launch = recorded  # type: ignore[method-assign]
        return made

    stage: list[str] = []
    began = time.monotonic()

    def traced(owner: Any, name: str) -> None:
        # the close path's steps, in the order they start and end (what a hang names)
        inner = getattr(owner, name)

        async def step(*args: Any, **kwargs: Any) -> Any:
            stage.append(f"{name}> {time.monotonic() - began:.1f}s")
            try:
                return await inner(*args, **kwargs)
            finally:
                stage.append(f"<{name} {time.monotonic() - began:.1f}s")

        setattr(owner, name, step)

    async def main() -> tuple[EpisodeResult, ThreadEnvPool]:
        pool = ThreadEnvPool(env, 4)
        engine = RolloutEngine(policy, pool, concurrency=4)
        for owner, name in ((engine, "_cancel_workers"), (pool, "_close_all"), (pool, "release")):
            traced(owner, name)
        opener = asyncio.create_task(open_gate_once_hangzhou_acts())
        async with engine, contextlib.aclosing(engine.run(specs)) as stream:
            async for first in stream:
                stage.append("first result")
                await opener
                assert pool.open_envs == 4  # four episodes were running
                stage.append("closing")
                return first, pool  # leaving cancels the other episodes
        raise AssertionError("no result")

    async def bounded() -> tuple[EpisodeResult, ThreadEnvPool]:
        # A hang here (Python 3.11's wait_for swallowing the cancel of an episode whose call had
        # just returned; envgym.rollout.engine._within) was found from what this prints: the
        # close path's steps, every thread's and every live task's stack, instead of only
        # pytest-timeout's limit.
        try:
            return await asyncio.wait_for(main(), 90)
        except TimeoutError:
            faulthandler.dump_traceback(all_threads=True)
            for task in asyncio.all_tasks():  # where each task still alive is waiting
                task.print_stack(file=sys.stderr)
            calls = sorted({(s, t) for s, t, _ in policy.calls})
            raise AssertionError(
                f"stuck after {stage}: policy calls {calls}, ended {sorted(policy.ended)}, gate "
                f"set {policy.gate is not None and policy.gate.is_set()}, workers {len(workers)}"
            ) from None

    first, pool = asyncio.run(bounded())
    assert first.task_id == "trip-001-d1" and first.passed
    assert pool.open_envs == 0
    started = {s for s, _, _ in policy.calls}
    assert started and started <= set(policy.ended)  # every started session was ended
    # Every worker the engine launched was killed *and reaped* by the time the engine closed
    # (a kill waits for its process): no wait loop.  Counting all new children instead was
    # flaky: warm Jupyter kernel pools of earlier test modules replace kernels in the
    # background, and a retiring kernel's jail is a child with an empty command line too.
    assert len(workers) >= 4
    left = {w.pid: (_proc_state(w.pid), _cmdline(w.pid)) for w in workers if w.returncode is None}
    assert not left, left
    assert not {w.pid for w in workers} & (children() - kids)
    # No fd of theirs is left: the pipes and pidfds closed at the kill, the stderr file once
    # nothing holds the handle.  (Counting all open fds was flaky for the reason above.)
    assert all(h._init_fd is None for h in handles)
    # Each launch recorded its three fds.  (Counting the union across launches was flaky: a
    # killed worker's pipe or stderr inode number is reused by a later launch.)
    assert opened == [3] * len(workers)
    handles.clear()
    gc.collect()
    assert not owned & fd_targets(), owned & fd_targets()


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def test_agent_policies_play_through_the_engine(bundle_dir: Path) -> None:
    gold_agent = AgentPolicy.gold(bundle_dir)
    try:
        results = run(gold_agent, bundle_dir, specs_for(TASKS, 1))
    finally:
        asyncio.run(gold_agent.aclose())
    assert all(r.passed and r.record.segments == [] for r in results)
    randoms = run(
        AgentPolicy.random(seed=1),
        bundle_dir,
        specs_for(["trip-001-d1"], 2),
        budget=RolloutBudget(max_turns=6),
    )
    again = run(
        AgentPolicy.random(seed=1),
        bundle_dir,
        specs_for(["trip-001-d1"], 2),
        budget=RolloutBudget(max_turns=6),
    )
    key = lambda rs: sorted((r.sample, [m.get("content") for m in r.messages]) for r in rs)  # noqa: E731
    assert key(randoms) == key(again)  # seeded per (task, sample)
    assert all(r.error is None and r.turns == 6 for r in randoms)


def test_cancelling_while_sandboxes_start_leaks_none(bundle_dir: Path) -> None:
    kids = children()
    made: list[BundleEnv] = []  # held here, so no garbage collection closes them for the pool

    def slow_env() -> BundleEnv:
        env = BundleEnv(bundle_dir)
        made.append(env)
        import time

        time.sleep(0.5)  # the caller is cancelled meanwhile
        return env

    async def main() -> None:
        engine = RolloutEngine(
            ScriptedPolicy(lambda task, sample: []), ThreadEnvPool(slow_env, 3), concurrency=3
        )
        stream = engine.run(specs_for(TASKS, 1))
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.1)
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await stream.aclose()
        await engine.aclose()  # waits for the starting sandboxes, then closes them

    asyncio.run(main())
    assert len(made) == 3 and all(env.sandbox._closed for env in made)
    assert children() <= kids


@pytest.mark.usefixtures("unforked")  # reads the bwrap launch's process
def test_closing_an_env_while_its_worker_launches_leaves_no_child(bundle_dir: Path) -> None:
    """The pool closes a cancelled episode's env from another thread while
    that env's ``reset`` may still be launching its sandbox worker (closing is what unblocks a
    stuck call).  A worker registered after ``close()`` was never killed nor waited for: bwrap
    exited (its staged bundle was gone) and stayed a zombie — the child with an empty command
    line the cancellation test found.  Here ``close()`` is made to land inside the launch."""
    import threading

    env = BundleEnv(bundle_dir)
    sandbox = env.sandbox
    real_launch = sandbox._launch
    launched, closed = threading.Event(), threading.Event()
    handles: list[Any] = []

    def launch(state: Any) -> Any:  # test double around the real launch: pauses after it
        handle = real_launch(state)
        handles.append(handle)
        launched.set()
        closed.wait(timeout=10)  # bounded: a close() that waited for us still lets us go on
        return handle

    sandbox._launch = launch  # type: ignore[method-assign]
    failures: list[BaseException] = []

    def reset() -> None:
        try:
            env.reset(options={"task": TASKS[0]})
        except BaseException as exc:  # noqa: BLE001 - a reset cut short by close() may raise
            failures.append(exc)

    def close() -> None:
        env.close()
        closed.set()

    resetter = threading.Thread(target=reset)
    resetter.start()
    assert launched.wait(timeout=60), failures
    closer = threading.Thread(target=close)
    closer.start()
    resetter.join(timeout=60)
    closer.join(timeout=60)
    assert handles and not resetter.is_alive() and not closer.is_alive()
    # Every worker this env launched was killed and reaped (no zombie, nothing running).
    left = {
        h.proc.pid: (_proc_state(h.proc.pid), _cmdline(h.proc.pid))
        for h in handles
        if h.proc.returncode is None
    }
    # Before the fix: a live bwrap nobody would kill; once its pipes were garbage-collected it
    # exited and stayed a zombie (state Z, empty command line) until the next Popen reaped it.
    assert not left, left
    assert not {h.proc.pid for h in handles} & children()


def _proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
