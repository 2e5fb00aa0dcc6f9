"""Progress inside episodes: a policy wrapper that reports every turn as it is sampled.

An evaluation's progress used to move only when an episode finished, so a run whose episodes
each take minutes looked hung.  :class:`WatchedPolicy` delegates to the real policy and, as
each turn starts and when it is sampled, reports :class:`InFlight`: the episodes running now, their turns and the tokens they
sampled so far (counted as the rollout engine counts them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envgym.policy import Policy, SamplingParams, Turn


@dataclass(frozen=True)
class InFlight:
    """The running episodes that have sampled at least one turn."""

    episodes: int
    turns: int  # turns started, summed over them
    most_turns: int  # the longest one's (the turn it is at)
    tokens: int  # sampled, summed over them
    last: str  # the session that just started or finished a turn

    def describe(self) -> str:
        """e.g. ``2 running · turn 5 · 1240 tokens`` (the longest episode's turn); "" for none."""
        if not self.episodes:
            return ""
        return f"{self.episodes} running · turn {self.most_turns} · {self.tokens} tokens"


TurnProgress = Callable[[InFlight], None]


class WatchedPolicy:
    """``inner`` with a report after each turn; every other attribute is ``inner``'s."""

    def __init__(self, inner: Policy, on_turn: TurnProgress) -> None:
        self.inner = inner
        self._on_turn = on_turn
        self._sessions: dict[str, tuple[int, int]] = {}  # session → (turns, sampled tokens)

    @property
    def name(self) -> str:
        return self.inner.name

    @name.setter
    def name(self, value: str) -> None:
        self.inner.name = value

    @property
    def version(self) -> int:
        return self.inner.version  # the trainer bumps it: read it live

    @version.setter
    def version(self, value: int) -> None:
        self.inner.version = value

    def __getattr__(self, attr: str) -> Any:  # context_window and other backend extras
        return getattr(self.inner, attr)

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        turns, tokens = self._sessions.get(session, (0, 0))
        self._sessions[session] = (turns + 1, tokens)  # reported as it starts: a slow turn shows
        self._report(session)
        turn = await self.inner.act(session, messages, tools, params)
        if isinstance(turn, Turn):
            tokens += len(turn.token_ids) or turn.usage.completion_tokens
        self._sessions[session] = (turns + 1, tokens)
        self._report(session)
        return turn

    def _report(self, session: str) -> None:
        try:
            self._on_turn(self.snapshot(session))
        except Exception:  # noqa: BLE001, S110 - a display failing must not fail the episode
            pass

    def snapshot(self, last: str) -> InFlight:
        counts = list(self._sessions.values())
        return InFlight(
            episodes=len(counts),
            turns=sum(t for t, _ in counts),
            most_turns=max((t for t, _ in counts), default=0),
            tokens=sum(k for _, k in counts),
            last=last,
        )

    async def end_session(self, session: str) -> None:
        if self._sessions.pop(session, None) is not None:
            self._report(session)  # one fewer running: the display must not keep it
        await self.inner.end_session(session)

    async def aclose(self) -> None:
        await self.inner.aclose()
