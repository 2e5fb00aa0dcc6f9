"""The per-step fast paths give exactly what the general code gave (env-step overhead work)."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest

from envgym.actions import _repair, _well_formed
from envgym.sandbox.inprocess import _render


class _Level(enum.IntEnum):
    HIGH = 3


class _Text(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        5,
        -7,
        10**30,
        0,
        2.5,
        True,
        False,
        None,
        "héllo",
        _Text("sub"),
        _Level.HIGH,
        [1, "ü", None],
        {"a": {"b": [1.5, True]}},
        {"emoji": "🙂"},
    ],
)
def test_render_is_json_dumps(value: Any) -> None:
    expected = (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, allow_nan=False)
    )
    assert _render(value) == expected
    assert type(_render(value)) is type(expected)  # a str subclass is handed over as it is


@pytest.mark.parametrize("value", [math.nan, [math.inf], {1, 2}, object()])
def test_render_refuses_what_json_refuses(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        _render(value)


def _call(arguments: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]}  # fmt: skip


@pytest.mark.parametrize(
    "text", ['{"a": 1}', '{"a": 1} ', ' {"a": 1}', '{"a": 1}\n', '{"a": 1} x', "{}"]
)
def test_fast_path_agrees_with_the_general_path_around_whitespace(text: str) -> None:
    fast, slow = _well_formed(_call(text)), _repair(_call(text))
    if fast is not None:
        assert fast == slow and fast.message == slow.message
    assert _well_formed(_call('{"a": 1}')) is not None  # the common case takes the fast path
