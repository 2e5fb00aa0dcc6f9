"""Cold-start SFT data from gold replays (DeepSeek-V3.2 §3.2.2): the tokens the env will parse.

Each task's gold solution (``BundleEnv.gold_calls``, what ``envgym eval --model gold``
replays) is played through the *same* env the evaluation builds
(``envgym.evaluate.runner.env_factory``: ``envgym.make`` with the same sandbox, context policy
and parser) by :class:`GoldTextPolicy`, a teacher-forcing policy that writes each call as the
text the model itself would write — the parser's format (``parser.format_calls``, Hermes
``<tool_call>…</tool_call>`` for SmolLM2) — and builds every prompt with the local engine's own
token-in/token-out rule (``envgym.models.session.next_prompt`` with the model's chat template).
The env parses that text with its parser, runs the calls and verifies the submission; the
rollout engine's ``RecordBuilder`` turns the turns into the per-token record, whose segments
are the examples.  An episode is kept only if it passed and the env parsed every turn back
into exactly the gold call (:class:`~envgym.trainer.sft_data.DataReport` counts the rest).  One call
per turn, as the local engine acts (it stops at ``</tool_call>``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.bundle import Bundle
from envgym.messages import ToolCall
from envgym.models.chat import ChatFormat
from envgym.models.session import TokenSession, forced_turn
from envgym.policy import PolicyError, SamplingParams, Turn
from envgym.rollout import EpisodeResult, EpisodeSpec, RolloutBudget, RolloutEngine
from envgym.rollout.episode import parse_session
from envgym.trainer.sft_data import DataReport, HeldOut, SFTExample, open_target, segment_examples

GoldCalls = list[tuple[str, dict[str, Any]]]
GoldProgress = Callable[[int, int], None]  # (done, total)


@dataclass
class _GoldSession:
    tokens: TokenSession
    calls: GoldCalls
    next: int = 0


class GoldTextPolicy:
    """A teacher-forcing :class:`~envgym.policy.Policy`: writes each gold call as model text.

    Per turn: the prompt ids are what the local engine would build (``next_prompt`` with the
    model's chat template: the previous ids + the sampled ids + the template's end-of-turn
    text + the new tool messages, or a fresh rendering when the context policy changed the
    history), and the "sampled" ids are ``fmt.encode(parser.format_calls([call]))`` — plus the
    end-of-sequence id when the engine does not stop at the call's end marker.  The turn's
    text is returned unparsed, so the env's own parser reads it.
    """

    version = 0

    def __init__(
        self,
        fmt: ChatFormat,
        gold: Callable[[str], GoldCalls],
        *,
        end_ids: frozenset[int],
        stop_at_tool_call: bool = True,
        name: str = "gold-text",
    ) -> None:
        if fmt.generation_prefix:
            raise ValueError("gold replays have no reasoning to write: use thinking=False")
        if not end_ids:
            raise ValueError("end_ids must name the model's end-of-turn token(s)")
        self.fmt = fmt
        self.name = name
        self._gold = gold
        self._end_ids = end_ids
        eos = fmt.tokenizer.eos_token_id
        self._eos = min(end_ids) if eos is None else eos
        self._stop_at_call = stop_at_tool_call
        self._sessions: dict[str, _GoldSession] = {}
        self.consumed: dict[str, GoldCalls] = {}  # session -> the calls written so far

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        state = self._sessions.get(session)
        if state is None:
            task_id, _ = parse_session(session)
            calls = await asyncio.to_thread(self._gold, task_id)
            state = self._sessions[session] = _GoldSession(TokenSession(), list(calls))
        if state.next >= len(state.calls):
            raise PolicyError(
                f"{session}: the gold solution made no more calls, the episode goes on"
            )
        name, arguments = state.calls[state.next]
        state.next += 1
        text = self.fmt.parser.format_calls([ToolCall(f"gold-{state.next}", name, dict(arguments))])
        turn = forced_turn(
            self.fmt,
            state.tokens,
            messages,
            tools,
            self._end_ids,
            text,
            end_id=None if self._stop_at_call else self._eos,
            finish_reason="tool_calls" if self._stop_at_call else "stop",
            where=session,
        )  # teacher-forced: logprobs 0, no sampling distribution
        self.consumed.setdefault(session, []).append((name, dict(arguments)))
        return turn

    async def end_session(self, session: str) -> None:
        self._sessions.pop(session, None)

    async def aclose(self) -> None:
        self._sessions.clear()


@dataclass(frozen=True)
class EnvOptions:
    """How the envs are built: the same options ``envgym eval`` takes (EvalConfig)."""

    sandbox: str = "bwrap"
    context: str = "thinking-retention"
    parser: str = "hermes"
    native_tools: bool = True


def _env_calls(result: EpisodeResult) -> GoldCalls:
    """The calls the env parsed from the assistant turns, in order (its full history)."""
    calls: GoldCalls = []
    for message in result.messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            try:
                arguments = json.loads(fn.get("arguments") or "null")
            except ValueError:
                arguments = fn.get("arguments")
            calls.append((str(fn.get("name")), arguments))
    return calls


def gold_examples(
    target: str | Path,
    fmt: ChatFormat,
    held_out: HeldOut,
    *,
    env: EnvOptions = EnvOptions(),
    limit: int | None = None,
    max_turn_tokens: int | None = None,
    max_turns: int | None = None,
    stop_at_tool_call: bool = True,
    concurrency: int = 2,
    progress: GoldProgress | None = None,
) -> tuple[list[SFTExample], DataReport]:
    """SFT examples from gold replays of ``target``'s tasks (an env id or bundle directory).

    ``limit``: the first N usable (not held-out) tasks.  ``max_turn_tokens``: drop episodes
    with a turn longer than the policy may sample per turn (``--max-tokens`` of the eval).
    ``max_turns``: drop episodes of more assistant turns than the policy may take (``--max-turns``
    of the eval, ``rollout.max_turns`` of training): a gold longer than the budget teaches a
    solution the policy can never finish.
    """
    if fmt.parser.name != env.parser:
        raise ValueError(
            f"the chat format writes {fmt.parser.name!r} calls but the env parses {env.parser!r}"
        )
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be ≥ 1, not {limit}")
    for name, value in (("max_turn_tokens", max_turn_tokens), ("max_turns", max_turns)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be ≥ 1, not {value}")
    bundle = open_target(target)
    held_out.check_sources([bundle])
    report = DataReport()
    tasks = []
    for task in bundle.tasks:
        why = held_out.reason(bundle.manifest.content_hash, task.id, task.prompt)
        if why is None and task.submit_tool is None:
            why = "no_submit_tool"
        if why is not None:
            report.dropped[why] += 1
        else:
            tasks.append(task.id)
    tasks = tasks[:limit]
    report.tasks = len(tasks)
    if not tasks:
        return [], report
    results = asyncio.run(
        _replay(target, bundle, fmt, env, tasks, stop_at_tool_call, concurrency, progress)
    )
    examples: list[SFTExample] = []
    for result, consumed in results:
        why = _rejection(result, consumed, max_turn_tokens, max_turns)
        if why is not None:
            report.dropped[why] += 1
            continue
        made = segment_examples(
            result.record.segments,
            source="gold",
            bundle_hash=bundle.manifest.content_hash,
            task_id=result.task_id,
        )
        report.add(made)
        examples.extend(made)
    return examples, report


def _rejection(
    result: EpisodeResult,
    consumed: GoldCalls,
    max_turn_tokens: int | None,
    max_turns: int | None,
) -> str | None:
    if result.error is not None:
        return f"error_{result.error}"
    if not result.passed:
        return "gold_failed"
    if _env_calls(result) != consumed:
        return "parse_mismatch"  # the env did not read the rendered text back as the gold calls
    if max_turn_tokens is not None:
        spans = (e - s for seg in result.record.segments for s, e in seg.turns)
        if any(n > max_turn_tokens for n in spans):
            return "turn_too_long"
    if max_turns is not None:
        turns = sum(m.get("role") == "assistant" for m in result.messages)
        if turns > max_turns:
            return "too_many_turns"
    return None


async def _replay(
    target: str | Path,
    bundle: Bundle,
    fmt: ChatFormat,
    env: EnvOptions,
    tasks: list[str],
    stop_at_tool_call: bool,
    concurrency: int,
    progress: GoldProgress | None,
) -> list[tuple[EpisodeResult, GoldCalls]]:
    from envgym.bundle_env import BundleEnv
    from envgym.evaluate.config import EvalConfig
    from envgym.evaluate.runner import env_factory
    from envgym.models.chat import end_tokens

    lock = threading.Lock()
    gold_env: list[BundleEnv] = []
    cache: dict[str, GoldCalls] = {}

    def gold(task_id: str) -> GoldCalls:
        # As AgentPolicy.gold: the solution runs in a private env of the same sandbox backend.
        with lock:
            if task_id not in cache:
                if not gold_env:
                    gold_env.append(BundleEnv(bundle.root, sandbox=env.sandbox))
                gold_env[0].reset(options={"task": task_id})
                cache[task_id] = gold_env[0].gold_calls()
            return list(cache[task_id])

    policy = GoldTextPolicy(
        fmt, gold, end_ids=end_tokens(fmt.tokenizer), stop_at_tool_call=stop_at_tool_call
    )
    config = EvalConfig(
        sandbox=env.sandbox, context=env.context, parser=env.parser, native_tools=env.native_tools
    )
    factory = env_factory(target, config)
    # Gold turns are never cut: the budget is the env's own (turns, calls), not sampled tokens.
    engine = RolloutEngine.local(
        policy,
        factory,
        concurrency=max(1, min(concurrency, len(tasks))),
        params=SamplingParams(temperature=0.0, max_tokens=1 << 20),
        budget=RolloutBudget(max_turns=1 << 10, max_tokens=1 << 30, max_seconds=600.0),
    )
    out: list[tuple[EpisodeResult, GoldCalls]] = []
    try:
        async with engine, contextlib.aclosing(engine.run(EpisodeSpec(t) for t in tasks)) as stream:
            async for result in stream:
                session = EpisodeSpec(result.task_id).session
                out.append((result, policy.consumed.pop(session, [])))
                if progress is not None:
                    progress(len(out), len(tasks))
    finally:
        await policy.aclose()
        await asyncio.to_thread(_close_all, gold_env)
    order = {t: i for i, t in enumerate(tasks)}
    return sorted(out, key=lambda pair: order[pair[0].task_id])  # deterministic data order


def _close_all(envs: list[Any]) -> None:  # BundleEnvs (imported lazily, with the bundles)
    for env in envs:
        env.close()
