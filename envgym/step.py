"""One step of a chat env, as one skeleton the envs fill in (``BundleEnv``, ``SweEnv``, ``Tau2Env``).

``run_step``: read the action → answer its calls → nudge when there were none → render the
observation → check the budgets → grade when the episode is over.  The order is the contract:
the budgets come after the render because the context-window budget counts the prompt just
rendered (and a compaction during the render changes it).  An env supplies the hooks of
:class:`StepHooks`; stop conditions return an :class:`Outcome` rather than setting state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from envgym.actions import NormalizedAction
from envgym.core import Action, Message, Observation, StepResult
from envgym.episode import EpisodeCounters, answer_calls
from envgym.messages import ToolCall
from envgym.parsers import ToolCallParser

if TYPE_CHECKING:
    from envgym.context.view import ContextView

__all__ = [
    "GOES_ON",
    "EnvBudgets",
    "CallByCall",
    "Outcome",
    "StepHooks",
    "StepResult",
    "not_verified",
    "run_step",
]

R = TypeVar("R")  # what ends an episode in a given env: a verdict, a submission, τ²'s ending


@dataclass(frozen=True)
class Outcome:
    """Why a step ended the episode: ``truncated_by`` names the budgets used up (comma-joined,
    in EnvBudgets' order), None while the episode goes on or when a result ended it."""

    truncated_by: str | None = None

    @property
    def truncated(self) -> bool:
        return self.truncated_by is not None


GOES_ON = Outcome()  # shared: the common step allocates nothing


@dataclass(frozen=True)
class EnvBudgets:
    """When an episode is cut short (``truncated``)."""

    # Generous: gold solutions of difficulty-5 trip plans make up to ~150 calls; the context
    # window, not these counts, is the binding limit for real models.
    max_turns: int = 128
    max_tool_calls: int = 256
    time_budget_s: float | None = None
    context_window: int | None = None  # tokens of the rendered prompt

    def exhausted(
        self, *, turns: int, tool_calls: int, started: float, prompt_tokens: Callable[[], int]
    ) -> list[str]:
        """The budgets an episode has used up (``started``: its ``time.monotonic()`` start;
        ``prompt_tokens`` is only counted when there is a window)."""
        reasons = []
        if turns >= self.max_turns:
            reasons.append("max_turns")
        if tool_calls >= self.max_tool_calls:
            reasons.append("max_tool_calls")
        if self.time_budget_s is not None and time.monotonic() - started >= self.time_budget_s:
            reasons.append("time_budget")
        if self.context_window is not None and prompt_tokens() > self.context_window:
            reasons.append("context_window")
        return reasons

    def outcome(
        self, *, turns: int, tool_calls: int, started: float, prompt_tokens: Callable[[], int]
    ) -> Outcome:
        """:meth:`exhausted` as a step's outcome."""
        if (  # every step asks: the common answer costs no list and no join
            turns < self.max_turns
            and tool_calls < self.max_tool_calls
            and self.time_budget_s is None
            and self.context_window is None
        ):
            return GOES_ON
        reasons = self.exhausted(
            turns=turns, tool_calls=tool_calls, started=started, prompt_tokens=prompt_tokens
        )
        return Outcome(",".join(reasons)) if reasons else GOES_ON


def not_verified(outcome: Outcome) -> dict[str, Any]:
    """The report of an episode a budget cut before its submission: no check ran, it failed."""
    return {"passed": False, "score": 0.0, "checks": [], "truncated_by": outcome.truncated_by}


class StepHooks(Protocol[R]):
    """What an env supplies to :func:`run_step` (private methods: they are the env's own)."""

    def _read(self, action: Action) -> NormalizedAction:
        """The agent's turn, read (parsed, ids made unique, problems counted) and recorded."""

    def _answer_turn(self, parsed: NormalizedAction) -> R | None:
        """Run the turn's calls and record their replies; what ended the episode, if one did."""

    def _nudge(self, parsed: NormalizedAction) -> R | None:
        """The turn had no call and no problem: a nudge (or a final answer's result)."""

    def _observe(self) -> Observation:
        """Render the next observation through the context policy."""

    def _budget_outcome(self) -> Outcome:
        """The stop conditions (after the render: the window counts the rendered prompt)."""

    def _finish(self, result: R | None, outcome: Outcome) -> tuple[float, dict[str, Any]]:
        """Reward and final ``info`` of an episode ended by ``result`` or cut by ``outcome``."""

    def _step_info(self, components: dict[str, float]) -> dict[str, Any]:
        """The ``info`` of a step that leaves the episode going on."""


def run_step(env: StepHooks[R], action: Action) -> StepResult:
    """One step; the caller refuses a step of a finished episode before calling this."""
    parsed = env._read(action)
    result = env._answer_turn(parsed)
    if result is None and not parsed.problems and not parsed.message.get("tool_calls"):
        result = env._nudge(parsed)
    obs = env._observe()  # before the budgets: the window counts the prompt just rendered
    outcome = env._budget_outcome() if result is None else GOES_ON
    if result is None and outcome.truncated_by is None:
        return obs, 0.0, False, False, env._step_info({})
    reward, info = env._finish(result, outcome)
    if outcome.truncated_by is not None:
        info["truncated_by"] = outcome.truncated_by
    return obs, reward, result is not None, outcome.truncated_by is not None, info


class CallByCall:
    """The read and answer hooks of an env that runs a turn's calls one by one, in message
    order, through its ``_answer(call, submitted) -> (reply, result or None)``."""

    episode: EpisodeCounters
    parser: ToolCallParser
    history: list[Message]

    def _answer(self, call: ToolCall, submitted: bool) -> tuple[str, Any]:
        raise NotImplementedError

    def _read(self, action: Action) -> NormalizedAction:
        parsed = self.episode.read(action, self.parser)
        self.history.append(parsed.message)
        return parsed

    def _answer_turn(self, parsed: NormalizedAction) -> Any:
        replies, result = answer_calls(parsed, self._answer)
        self.history.extend(replies)
        return result


class RenderedTools:
    """The observe and info hooks of an env whose tools are a table (``self.tools.table``, None
    before the first reset) shown with its history through a :class:`ContextView`."""

    tools: Any
    view: ContextView
    history: list[Message]
    episode: EpisodeCounters

    def _schemas(self) -> list[dict[str, Any]]:
        assert self.tools is not None
        schemas: list[dict[str, Any]] = self.tools.table.schemas()
        return schemas

    def _observe(self) -> Observation:
        return {
            "messages": self.view.render(self.history, self._schemas()),
            "tools": self._schemas(),
        }

    def _info(self, components: dict[str, float]) -> dict[str, Any]:
        return self.episode.info(self.view, components)

    def _step_info(self, components: dict[str, float]) -> dict[str, Any]:
        return self._info(components)
