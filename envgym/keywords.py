"""Keyword checks for env constructors: a misspelled ``make`` keyword is named, with the valid ones.

The chat envs pass their extra keywords on as budget overrides (``max_turns=...``), so without
this check a typo surfaces deep inside as ``EnvBudgets.__init__() got an unexpected keyword
argument``, naming neither the env nor what it would have accepted.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from typing import Any

from envgym.step import EnvBudgets


def init_keywords(cls: type) -> list[str]:
    """The named keyword parameters of ``cls.__init__`` and of every base's ``__init__``."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):  # a builtin without a signature
            continue
        for p in params:
            kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            if p.kind in kinds and p.name != "self" and p.name not in names:
                names.append(p.name)
    return names


def refuse_unknown(given: Iterable[str], valid: Iterable[str], *, where: str) -> None:
    """Raise ``TypeError`` naming every keyword of ``given`` not in ``valid``.

    The valid keywords are listed close matches first (difflib), then the rest sorted, so the
    likely intended spelling is the first thing read.
    """
    allowed = list(dict.fromkeys(valid))
    unknown = [k for k in given if k not in allowed]
    if not unknown:
        return
    close: list[str] = []
    for name in unknown:
        close += [c for c in difflib.get_close_matches(name, allowed, n=3) if c not in close]
    rest = sorted(k for k in allowed if k not in close)
    bad = ", ".join(repr(k) for k in unknown)
    noun = "keyword" if len(unknown) == 1 else "keywords"
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise TypeError(
        f"{where} got unknown {noun} {bad}{hint}; valid keywords, closest first: "
        f"{', '.join(close + rest)}"
    )


#: What ``envgym eval`` passes every env (envgym/evaluate/runner.py); an env whose tools do not
#: run in an envgym sandbox accepts and ignores them.
EVAL_OPTIONS = ("sandbox", "time_budget_s")


def env_keywords(env_cls: type, *, extra: Iterable[str] = ()) -> list[str]:
    """Every keyword an env class that takes budget overrides accepts: its own, the budgets'."""
    return [*init_keywords(env_cls), *(f.name for f in fields(EnvBudgets)), *extra]


def budgets_with(
    base: EnvBudgets, overrides: Mapping[str, Any], *, env_cls: type, where: str | None = None
) -> EnvBudgets:
    """``base`` with the budget ``overrides`` applied, or a ``TypeError`` naming a bad keyword.

    ``overrides`` are the keywords ``env_cls.__init__`` did not take itself, so the valid list
    is its own keywords plus the budget fields.
    """
    refuse_unknown(overrides, env_keywords(env_cls), where=where or env_cls.__name__)
    return replace(base, **overrides)
