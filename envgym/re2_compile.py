"""A schema ``pattern`` compiled by RE2: the one rule that load-time checks and validation share.

:mod:`envgym.schema_guard` refuses a schema whose patterns RE2 cannot compile and
:mod:`envgym.schema_validator` runs them; both import this module (and not each other), so the
limits below are one definition for both.
"""

from __future__ import annotations

from typing import Any

import re2

MAX_PATTERN_CHARS = 1_000
RE2_MAX_MEM = 8 << 20  # bytes of automaton per compiled pattern: bounds compile time and memory


def re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    options.max_mem = RE2_MAX_MEM
    return options


def compile_re2(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear-time matching), or ValueError with RE2's reason."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(
            f"the pattern is {len(pattern)} characters; the limit is {MAX_PATTERN_CHARS}"
        )
    try:
        return re2.compile(pattern, re2_options())
    except re2.error as exc:
        reason = (
            exc.args[0].decode(errors="replace")
            if exc.args and isinstance(exc.args[0], bytes)
            else str(exc)
        )
        raise ValueError(
            f"RE2 cannot compile {pattern!r}: {reason} (no backreferences or lookaround)"
        ) from None
