"""The model's context window as an episode outcome, not an infrastructure failure.

A prompt that no longer fits the model's window ends the episode the way a spent token budget
does: truncated (``truncated_by="context_window"``), reward 0, counted in the evaluation's n.
Filing it as a backend error would drop it from n and inflate pass@k.  Backends raise
:class:`ContextWindowExceeded` instead of a plain :class:`~envgym.policy.PolicyError` when the
prompt is too long; the rollout engine truncates the episode on it.  Envs built with the
model's window and an overflow strategy (envgym.context.overflow) compact before this happens.
"""

from __future__ import annotations

from envgym.policy import PolicyError


class ContextWindowExceeded(PolicyError):
    """The prompt (``prompt_tokens``) leaves no room in the model's window (``window``)."""

    def __init__(
        self, message: str, *, prompt_tokens: int | None = None, window: int | None = None
    ) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.window = window
