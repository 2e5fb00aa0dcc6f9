"""``ContextView``: what an env shows its policy, kept beside the full history.

An env records everything in ``history`` (the trajectory) and renders the policy's prompt from a
*base*: the history as appended, compacted in place when it overflows (the manager's protocol,
manager.py).  The view keeps that base, where each base message came from in ``history`` (so
what was dropped is recorded by history index, DESIGN.md's context contract), and the last
rendered prompt (for token budgets).  ``BundleEnv`` and families that are not bundles (τ²) share
it, so every env honours ``envgym eval``'s ``--context`` and ``--context-window`` the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .manager import ContextManager
from .policies import Message


class ContextView:
    """The base a policy renders from ``history``, compacted past the manager's threshold."""

    def __init__(self, manager: ContextManager) -> None:
        self.manager = manager
        self._budgeted = manager.budget is not None  # a frozen manager: asked once, not per step
        self.start([])

    def start(self, history: Sequence[Message]) -> None:
        """A new episode whose history so far is ``history`` (appended to in place later)."""
        self._base: list[Message] = list(history)
        self._origins: list[int | None] = list(
            range(len(history))
        )  # history index of each base message
        self._seen = len(history)
        self.compactions: list[dict[str, Any]] = []  # everything compaction dropped this episode
        self.dropped_now: list[dict[str, Any]] = []  # what the last render left out (reasoning)
        self.rendered: list[Message] = list(history)

    def render(self, history: Sequence[Message], tools: list[dict[str, Any]]) -> list[Message]:
        """The prompt's messages now: new history taken in, compacted first if it overflows."""
        seen, self._seen = self._seen, len(history)
        if seen < self._seen:  # slices and ranges: per-message Python work runs on every step
            self._base.extend(history[seen:])
            self._origins.extend(range(seen, self._seen))
        rendered = self.manager.render(self._base)
        if self._budgeted and self.manager.overflowing(rendered.messages, tools):
            compacted = self.manager.compact_tracked(self._base, tools)
            # Records index history: the base may itself be compacted already.
            self.compactions.extend(
                {**d.to_dict(), "index": self._origins[d.index]}
                for d in compacted.dropped
                if self._origins[d.index] is not None
            )
            self._origins = [None if o is None else self._origins[o] for o in compacted.origins]
            self._base = compacted.messages
            rendered = self.manager.render(self._base)
        self.dropped_now = (
            [
                {**d.to_dict(), "index": self._origins[d.index]}
                for d in rendered.dropped
                if self._origins[d.index] is not None
            ]
            if rendered.dropped
            else []
        )
        self.rendered = rendered.messages
        return rendered.messages
