"""Values written into text another program parses: TOML, shell, file names.

One rule for every Harbor export (bundle tasks here, SWE instances in
envgym/envs/swe/harbor_text.py): a value never changes the structure of the text it lands in.

* **TOML**: strings are JSON string literals, which are valid TOML basic strings once DEL is
  escaped too (TOML forbids it raw); a newline, a quote or ``]`` inside stays inside the string.
  Keys are bare keys only (checked), never built from input.
* **shell**: `shell_word` is ``shlex.quote`` (a newline inside single quotes is part of the
  word) after refusing NUL, which bash drops silently (the word would change).
* **names**: `dir_name` turns any id into one path component of ``[A-Za-z0-9._-]``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

__all__ = ["QuotingError", "dir_name", "shell_word", "toml_document", "toml_value"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")


class QuotingError(ValueError):
    """A value that cannot be written as data into the text it was meant for."""


def toml_value(value: Any) -> str:
    """A TOML literal for a JSON-like value (bool, int, float, str, list, table)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuotingError(f"{value!r} has no place in task.toml")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    # JSON string escapes are TOML basic-string escapes, except DEL which TOML wants escaped
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(key: Any) -> str:
    # Keys are ours (field names), but a quoted key costs nothing and can hold anything.
    text = str(key)
    return text if _BARE_KEY.fullmatch(text) else toml_value(text)


def toml_document(top: Mapping[str, Any], tables: Mapping[str, Mapping[str, Any]]) -> str:
    """``key = value`` lines, then one ``[table]`` per entry of `tables`, in order."""
    out = [f"{_key(k)} = {toml_value(v)}" for k, v in top.items()]
    for name, table in tables.items():
        out += ["", f"[{_key(name)}]"] + [f"{_key(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(out) + "\n"


def shell_word(value: str) -> str:
    """`value` as one shell word (single-quoted unless it needs no quotes)."""
    if "\0" in value:
        raise QuotingError(f"{value[:60]!r}… holds a NUL character, which a shell drops")
    return shlex.quote(value)


def dir_name(task_id: str) -> str:
    """One path component for an id: odd characters replaced, a digest added if any were.

    Two ids that differ only in replaced characters ("a/b", "a:b") still get different names.
    """
    clean = _NAME_CHARS.sub("_", task_id).strip("._")[:80]
    if clean and clean == task_id:
        return clean
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{clean or 'task'}-{digest}"
