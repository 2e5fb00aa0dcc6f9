"""Context management: what of an episode's history the model sees on its next turn.

* Reasoning policies (:mod:`.policies`): ``thinking-retention`` (DeepSeek-V3.2 §3.2.1),
  ``discard-reasoning`` (DeepSeek-R1), ``keep-all``.
* Overflow strategies (:mod:`.overflow`), past 80% of the window (DeepSeek-V3.2 §4.4):
  ``summary``, ``discard-75``, ``discard-all``.
* :class:`ContextManager` picks both by name.  See docs/CONTEXT.md.
* :class:`ContextWindowExceeded` (:mod:`.window`): a prompt past the model's window, which
  truncates the episode instead of erroring it.
"""

from .manager import DEFAULT_THRESHOLD, ContextManager
from .overflow import (
    DISCARD_NOTICE,
    OVERFLOW_STRATEGIES,
    SUMMARY_PREFIX,
    Summarizer,
    discard_all,
    discard_fraction,
    summarize,
    tool_call_groups,
)
from .policies import (
    POLICIES,
    Dropped,
    ReasoningPolicy,
    Rendered,
    discard_reasoning,
    keep_all,
    thinking_retention,
)
from .window import ContextWindowExceeded

__all__ = [
    "DEFAULT_THRESHOLD",
    "DISCARD_NOTICE",
    "OVERFLOW_STRATEGIES",
    "POLICIES",
    "SUMMARY_PREFIX",
    "ContextManager",
    "ContextWindowExceeded",
    "Dropped",
    "ReasoningPolicy",
    "Rendered",
    "Summarizer",
    "discard_all",
    "discard_fraction",
    "discard_reasoning",
    "keep_all",
    "summarize",
    "thinking_retention",
    "tool_call_groups",
]
