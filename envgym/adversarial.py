"""Generic exploits that every verifier must survive (docs/CHECK.md).

Each :class:`Exploit` is a submission built from the task text and the gold submission alone,
so it applies to every family: prompt echo (the task text, its numbers and its expressions),
empty/whitespace answers, the answer format's example values, the gold answer wrapped in text,
boxed or fenced, type-confused values, huge values and deeply nested values.

``gold_form`` marks exploits that still carry the gold answer (wrapped, boxed, fenced, a number
given as its string): a verifier may accept or reject those.  Every other exploit must be
rejected.  For every exploit the verifier must return a report; a crash never counts as a
rejection (see ``envgym.check``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

HUGE_STRING_BYTES = 1_000_000
NEST_DEPTH = 3000  # as JSON text inside a string argument: what a model can actually send
NEST_DEPTH_VALUE = 200  # as a structured argument (the host's JSON encoder stops near 1000)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
# Arithmetic the prompt spells out, e.g. "17 * 23 + 4": two or more numbers joined by operators.
_EXPRESSION = re.compile(r"-?\d+(?:\.\d+)?(?:\s*[-+*/^%]\s*\(?-?\d+(?:\.\d+)?\)?)+")
_FENCED = re.compile(r"```[a-zA-Z]*\n(.*?)```", re.S)
_PLACEHOLDERS: tuple[Any, ...] = (
    "answer",
    "...",
    "<answer>",
    "your answer here",
    "example",
    "N/A",
    0,
    42,
)
_MAX_ECHO_NUMBERS = 8


@dataclass(frozen=True)
class Exploit:
    name: str
    submission: dict[str, Any]
    gold_form: bool = False  # the gold answer in another form: accepting it is allowed


def exploits(
    prompt: str,
    gold: Mapping[str, Any],
    *,
    argument_schema: Mapping[str, Any] | None = None,
) -> list[Exploit]:
    """Every generic exploit of one task, deduplicated, none equal to ``gold``."""
    gold = dict(gold)
    out: list[Exploit] = []
    seen = {_key(gold)}
    for exploit in _all(prompt, gold, argument_schema or {}):
        key = _key(exploit.submission)
        if key not in seen:
            seen.add(key)
            out.append(exploit)
    return out


def _key(value: Any) -> str:
    return repr(sorted(value.items())) if isinstance(value, dict) else repr(value)


def _all(prompt: str, gold: dict[str, Any], schema: Mapping[str, Any]) -> Iterator[Exploit]:
    names = list(gold) or ["content"]
    strings = [k for k in names if isinstance(gold.get(k), str)]
    numbers = [k for k in names if _is_number(gold.get(k))]
    echo_targets = strings + numbers

    # Empty and whitespace: nothing at all, every argument blank, one argument blank.
    yield Exploit("empty:no_arguments", {})
    for blank, label in (("", "empty"), ("   \n\t ", "whitespace")):
        yield Exploit(f"{label}:all", {k: blank for k in names})
        for k in names:
            yield Exploit(f"{label}:{k}", {**gold, k: blank})

    # Prompt echo: the whole task text, its numbers, its expressions.
    for k in strings:
        yield Exploit(f"echo_prompt:{k}", {**gold, k: prompt})
    yield Exploit("echo_prompt:all", {k: prompt for k in names})
    found_numbers = list(dict.fromkeys(_NUMBER.findall(prompt)))[:_MAX_ECHO_NUMBERS]
    expressions = list(dict.fromkeys(m.group(0).strip() for m in _EXPRESSION.finditer(prompt)))
    for k in echo_targets:
        for text in found_numbers:
            value: Any = text if isinstance(gold[k], str) else _as_number(text)
            if not _same_value(value, gold[k]):
                yield Exploit(f"echo_number:{k}={text}", {**gold, k: value})
        for text in expressions[:_MAX_ECHO_NUMBERS]:
            yield Exploit(f"echo_expression:{k}={text[:40]}", {**gold, k: text})

    # The answer format's example values: schema examples/defaults, fenced blocks, placeholders.
    for k, examples in _format_examples(prompt, schema, names).items():
        for i, example in enumerate(examples):
            if not _same_value(example, gold.get(k)):
                yield Exploit(f"format_example:{k}#{i}", {**gold, k: example})

    # The gold answer in another form (allowed either way) and type confusions.
    for k in strings:
        s = gold[k]
        yield Exploit(
            f"wrapped:{k}", {**gold, k: f"The final answer is: {s}\nI am confident."}, True
        )
        yield Exploit(f"boxed:{k}", {**gold, k: f"\\boxed{{{s}}}"}, True)
        yield Exploit(f"fenced:{k}", {**gold, k: f"```\n{s}\n```"}, True)
        yield Exploit(f"fenced_json:{k}", {**gold, k: f"```json\n{s}\n```"}, True)
        yield Exploit(f"as_list:{k}", {**gold, k: [s]}, True)
        number = _as_number(s.strip())
        if number is not None:
            yield Exploit(f"as_number:{k}", {**gold, k: number}, True)
        else:
            yield Exploit(f"type_number:{k}", {**gold, k: 0})
        for other, label in ((True, "bool"), (None, "null"), ({}, "object")):
            yield Exploit(f"type_{label}:{k}", {**gold, k: other})
    for k in numbers:
        n = gold[k]
        yield Exploit(
            f"as_string:{k}", {**gold, k: repr(n) if isinstance(n, float) else str(n)}, True
        )
        yield Exploit(f"as_list:{k}", {**gold, k: [n]}, True)
        yield Exploit(f"type_word:{k}", {**gold, k: "a number"})
        yield Exploit(f"type_null:{k}", {**gold, k: None})

    # Huge and deeply nested values, in every argument.
    nested_text = "[" * NEST_DEPTH + "]" * NEST_DEPTH
    nested_value: Any = []
    for _ in range(NEST_DEPTH_VALUE):
        nested_value = [nested_value]
    for k in names:
        yield Exploit(f"huge_int:{k}", {**gold, k: 10**400})
        yield Exploit(f"huge_float:{k}", {**gold, k: 1e999})
        yield Exploit(f"huge_negative_float:{k}", {**gold, k: -1e999})
        yield Exploit(f"huge_int_text:{k}", {**gold, k: "9" * 400})
        yield Exploit(f"huge_string:{k}", {**gold, k: "A" * HUGE_STRING_BYTES})
        yield Exploit(f"nested_text:{k}", {**gold, k: nested_text})
        yield Exploit(
            f"nested_object_text:{k}", {**gold, k: '{"a":' * NEST_DEPTH + "1" + "}" * NEST_DEPTH}
        )
        yield Exploit(f"nested_value:{k}", {**gold, k: nested_value})


def _format_examples(
    prompt: str, schema: Mapping[str, Any], names: list[str]
) -> dict[str, list[Any]]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    props = props if isinstance(props, Mapping) else {}
    fenced = [block.strip() for block in _FENCED.findall(prompt) if block.strip()]
    out: dict[str, list[Any]] = {}
    for k in names:
        spec = props.get(k)
        spec = spec if isinstance(spec, Mapping) else {}
        values: list[Any] = [
            *spec.get("examples", ()),
            *([spec["default"]] if "default" in spec else []),
        ]
        values += fenced  # the prompt's own format block, sent back verbatim
        values += list(_PLACEHOLDERS)
        out[k] = values
    return out


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _same_value(candidate: Any, gold: Any) -> bool:
    """Whether an echoed value happens to *be* the gold answer (then it is no exploit)."""
    if candidate == gold:
        return True
    a = _as_number(candidate.strip()) if isinstance(candidate, str) else candidate
    b = _as_number(gold.strip()) if isinstance(gold, str) else gold
    return (
        _is_number(a)
        and _is_number(b)
        and math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    )
