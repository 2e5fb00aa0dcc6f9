"""A cheap, honest policy with a known pass rate: replay the gold calls, slipping sometimes.

Used to measure the pass@k filter's early stopping without a GPU (envgym/benchmarks/synth.py) and to
test the filter.  Each turn replays the task's next gold tool call as Hermes text; with
probability ``slip`` (drawn from the engine's per-turn seed, so runs are reproducible) it
instead submits an empty answer and the episode fails.  A task whose gold makes ``m`` calls
therefore passes with probability ``(1 - slip) ** m``: long, hard tasks are solved rarely.

Token counts are real: the completion is tokenized with the embedded SmolLM2 tokenizer, and
the prompt is counted incrementally (each turn's new messages, rendered as plain text).  No
model runs, so there are no per-token ids (``prompt_ids`` stays None).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from pathlib import Path
from typing import Any

from envgym.bundle_env import BundleEnv
from envgym.policy import SamplingParams, Turn, Usage
from envgym.rollout import parse_session


def smollm2_tokenizer() -> Any:
    """The embedded model's tokenizer from its cached HF folder (converted once; fast after)."""
    from transformers import AutoTokenizer

    from envgym.embedded import hf_dir

    return AutoTokenizer.from_pretrained(str(hf_dir()))


class SlipPolicy:
    version = 0

    def __init__(
        self,
        bundle_dir: Path | str,
        *,
        slip: float = 0.03,
        sandbox: str = "bwrap",
        tokenizer: Any = None,
    ) -> None:
        if not 0.0 <= slip <= 1.0:
            raise ValueError(f"slip must be a probability, not {slip}")
        self.name = f"slip-gold(slip={slip})"
        self.bundle_dir = Path(bundle_dir)
        self.slip = slip
        self.sandbox = sandbox
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        self._gold: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self._env: BundleEnv | None = None
        self._sessions: dict[
            str, dict[str, int]
        ] = {}  # session -> {"next": i, "seen": messages counted, "prompt": n}

    def _calls(self, task_id: str) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            if task_id not in self._gold:
                if self._env is None:
                    self._env = BundleEnv(self.bundle_dir, sandbox=self.sandbox)
                self._env.reset(options={"task": task_id})
                self._gold[task_id] = self._env.gold_calls()
            return self._gold[task_id]

    def _count(self, text: str) -> int:
        if self._tokenizer is None:
            self._tokenizer = smollm2_tokenizer()
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        task_id, _ = parse_session(session)
        calls = await asyncio.to_thread(self._calls, task_id)
        state = self._sessions.setdefault(session, {"next": 0, "seen": 0, "prompt": 0})
        fresh = messages[state["seen"] :]
        state["prompt"] += sum(self._count(json.dumps(m, ensure_ascii=False)) for m in fresh)
        if state["seen"] == 0:
            state["prompt"] += self._count(json.dumps(tools, ensure_ascii=False))
        rng = random.Random(params.seed)
        i = state["next"]
        if i >= len(calls) or rng.random() < self.slip:
            name, args = calls[-1][0], {k: "" for k in calls[-1][1]}  # give up: submit blanks
        else:
            name, args = calls[i]
        state["next"] = i + 1
        call = {"name": name, "arguments": args}
        text = f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"
        completion = self._count(text)
        state["seen"] = len(messages) + 1  # our own reply is part of the next prompt
        state["prompt"] += completion
        message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
                }
            ],
        }
        usage = Usage(prompt_tokens=state["prompt"] - completion, completion_tokens=completion)
        return Turn(text=text, message=message, usage=usage, finish_reason="tool_calls")

    async def end_session(self, session: str) -> None:
        self._sessions.pop(session, None)

    async def aclose(self) -> None:
        with self._lock:
            if self._env is not None:
                self._env.close()
                self._env = None
