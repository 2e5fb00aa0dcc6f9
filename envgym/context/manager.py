"""``ContextManager``: one env × model's reasoning policy and overflow strategy, by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from envgym.tokens import ApproxTokenCounter, TokenCounter

from .overflow import OVERFLOW_STRATEGIES, Summarizer, discard_all, discard_fraction, summarize
from .policies import POLICIES, Dropped, Message, Rendered, last_user_turn, thinking_retention

DEFAULT_THRESHOLD = 0.8  # DeepSeek-V3.2 §4.4: strategies kick in past 80% of the window


@dataclass(frozen=True)
class ContextManager:
    """Renders a history for the model and compacts it when it outgrows the window.

    The env keeps a *base* history and, before each model turn::

        rendered = cm.render(base)
        if cm.overflowing(rendered.messages, tools):
            base, dropped = cm.compact(base, tools)   # adopt: the rollout re-starts from it
            rendered = cm.render(base)

    Compaction is adopted rather than re-applied on every render so the prompt's prefix stays
    stable between turns, as when the seed re-initiates the rollout (§4.4).

    Args:
        policy: ``"thinking-retention"`` (default), ``"discard-reasoning"`` or ``"keep-all"``.
        overflow: ``"summary"``, ``"discard-75"``, ``"discard-all"`` or None (never compact).
        window: the model's context window in tokens; needed for ``overflow``.
        threshold: fraction of ``window`` past which the prompt overflows.
        counter: counts prompt tokens; None means :class:`ApproxTokenCounter`.
        summarizer: the summary writer, required by ``overflow="summary"``.
        env_messages_end_turn: under thinking retention, whether the env's own user-role
            nudges (``name == ENV_AUTHOR``) end the reasoning chain like a real user message.
            Off by default: DeepSeek-V3.2 §3.2.1 keeps reasoning until a *new user message*.
    """

    policy: str = "thinking-retention"
    overflow: str | None = None
    window: int | None = None
    threshold: float = DEFAULT_THRESHOLD
    counter: TokenCounter | None = None
    summarizer: Summarizer | None = None
    env_messages_end_turn: bool = False
    _default_counter: TokenCounter = field(init=False, repr=False, compare=False)
    # (history list, length searched, latest user turn, that message): the env appends to one
    # list, so each render searches only the new messages for a user turn
    # (a step must not cost the whole history again).
    _turn_memo: tuple[Any, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            known = ", ".join(POLICIES)
            raise ValueError(f"unknown context policy {self.policy!r}; known policies: {known}")
        if self.overflow is not None and self.overflow not in OVERFLOW_STRATEGIES:
            known = ", ".join(OVERFLOW_STRATEGIES)
            raise ValueError(
                f"unknown overflow strategy {self.overflow!r}; known strategies: {known}"
            )
        if self.overflow == "summary" and self.summarizer is None:
            raise ValueError("overflow='summary' needs a summarizer: a callable (messages) -> str")
        if self.window is not None and (isinstance(self.window, bool) or self.window <= 0):
            raise ValueError(f"window must be a positive number of tokens, not {self.window!r}")
        if self.overflow is not None and self.window is None:
            raise ValueError(
                f"overflow={self.overflow!r} needs window= (the context size in tokens)"
            )
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], not {self.threshold}")
        # One default counter for the manager's life, since counters cache per-message counts.
        object.__setattr__(self, "_default_counter", ApproxTokenCounter())

    def with_counter(self, counter: TokenCounter | None) -> ContextManager:
        return replace(self, counter=counter)

    def render(self, history: Sequence[Mapping[str, Any]]) -> Rendered:
        """The messages to show the model under the reasoning policy (no compaction)."""
        if self.policy == "thinking-retention":
            last = self._last_user_turn(history)
            return thinking_retention(
                history, env_messages_end_turn=self.env_messages_end_turn, last_user=last
            )
        return POLICIES[self.policy](history)

    def _last_user_turn(self, history: Sequence[Mapping[str, Any]]) -> int:
        """:func:`last_user_turn`, searching only what was appended since the last render of
        the same list (a shorter list, another list, or a changed message means a full search;
        histories are append-only between renders, as the env's are)."""
        ends = self.env_messages_end_turn
        memo = self._turn_memo  # one tuple: read and written atomically
        if (
            memo
            and memo[0] is history
            and memo[1] <= len(history)
            and (memo[2] < 0 or history[memo[2]] is memo[3])
        ):
            newer = last_user_turn(history, env_messages_end_turn=ends, start=memo[1])
            last = newer if newer >= 0 else memo[2]
        else:
            last = last_user_turn(history, env_messages_end_turn=ends)
        object.__setattr__(
            self, "_turn_memo", (history, len(history), last, history[last] if last >= 0 else None)
        )
        return last

    def count(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        counter = self.counter if self.counter is not None else self._default_counter
        return counter.count(messages, tools)

    @property
    def budget(self) -> float | None:
        """Tokens past which a prompt overflows, or None without a window."""
        return None if self.window is None else self.threshold * self.window

    def overflowing(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> bool:
        """Whether already-rendered ``messages`` pass ``threshold × window`` tokens."""
        budget = self.budget
        return budget is not None and self.count(messages, tools) > budget

    def compact(
        self, history: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> tuple[list[Message], tuple[Dropped, ...]]:
        """Apply the overflow strategy: once, then again while the rendered prompt still
        overflows and the strategy still frees something.  Returns the new base history and
        what left it (indices into ``history``).  Without a strategy nothing changes.
        """
        result = self.compact_tracked(history, tools)
        return result.messages, result.dropped

    def compact_tracked(
        self, history: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
    ) -> Rendered:
        """:meth:`compact`, also giving ``origins``: the index in ``history`` each new message
        came from (None for what the strategy wrote), so a caller whose ``history`` is itself
        a compacted view can map everything back to its full transcript."""
        current = [dict(m) for m in history]
        origins: list[int | None] = list(range(len(history)))
        if self.overflow is None:
            return Rendered(current, (), tuple(origins))
        dropped: list[Dropped] = []
        while True:
            result = self._apply(current)
            if not result.dropped:
                break
            for d in result.dropped:
                origin = origins[d.index]
                if origin is not None:  # None: a summary written by an earlier pass, not input
                    dropped.append(replace(d, index=origin))
            origins = [None if o is None else origins[o] for o in result.origins]
            current = result.messages
            if not self.overflowing(self.render(current).messages, tools):
                break
        return Rendered(current, tuple(sorted(dropped, key=lambda d: d.index)), tuple(origins))

    def _apply(self, history: list[Message]) -> Rendered:
        if self.overflow == "discard-75":
            return discard_fraction(history, 0.75)
        if self.overflow == "discard-all":
            return discard_all(history)
        assert self.summarizer is not None  # checked in __post_init__
        return summarize(history, self.summarizer)
