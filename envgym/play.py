"""``envgym play``: a person plays an episode in the terminal, calling tools by hand."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.panel import Panel

from envgym.core import Env

HELP = (
    "Type a tool call as  NAME {json arguments}  or  NAME key=value ...  (values may be JSON:\n"
    "key={...} or key=[...] is read as typed, spaces and quotes included).  A tool with one\n"
    'parameter also takes its value alone, as JSON:  NAME [1, 2]  NAME {...}  NAME "text".\n'
    "Commands: :tools  :help  :quit"
)
MAX_LINE = 1 << 20  # a pasted answer, not a file
_KEY = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.\-]*)=")
# one shell word: unquoted characters, backslash escapes, '...' and "..." runs
_WORD = re.compile(r"""(?:[^\s'"\\]|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+""")
_DECODER = json.JSONDecoder()


def _json(text: str) -> tuple[bool, Any, str]:
    """(ok, value, error) of ``json.loads(text)``; a too-deep value is an error, not a crash."""
    try:
        return True, json.loads(text), ""
    except json.JSONDecodeError as exc:
        return False, None, str(exc)
    except RecursionError:
        return False, None, "nested too deeply"


def _whole(name: str, rest: str, params: Sequence[str] | None) -> tuple[str, dict[str, Any]] | str:
    """``NAME {json}`` / ``NAME [json]``: the arguments object, or a one-parameter tool's value."""
    ok, value, error = _json(rest)
    if not ok:
        return f"arguments are not valid JSON: {error}"
    only = params[0] if params is not None and len(params) == 1 else None
    if isinstance(value, dict) and (only is None or set(value) <= {only}):
        return name, value
    if only is not None:  # a JSON answer typed as it is, for the tool's one parameter
        return name, {only: value}
    if isinstance(value, list):
        return "a bare JSON array needs a tool with one parameter; write key=[...]"
    return "arguments must be a JSON object"


def _pairs(rest: str) -> dict[str, Any] | str:
    """``k=v …``: a value starting with { or [ is raw JSON up to its end; others are shell words
    (quotes group, then JSON if they parse as JSON, else the text)."""
    args: dict[str, Any] = {}
    pos = 0
    while pos < len(rest):
        if rest[pos:].strip() == "":
            break
        key = _KEY.match(rest, pos)
        if key is None:
            word = _WORD.match(rest, pos + len(rest[pos:]) - len(rest[pos:].lstrip()))
            shown = word.group(0) if word else rest[pos:].strip()
            try:
                shown = shlex.split(shown)[0]
            except (ValueError, IndexError):
                pass
            return f"expected key=value, got {shown!r}"
        name, pos = key.group(1), key.end()
        if rest[pos : pos + 1] in ("{", "["):
            try:
                args[name], pos = _DECODER.raw_decode(rest, pos)
            except json.JSONDecodeError as exc:
                return f"{name}= is not valid JSON: {exc}"
            except RecursionError:
                return f"{name}= is nested too deeply"
        else:
            word = _WORD.match(rest, pos)
            if word is None and rest[pos : pos + 1] in ("'", '"'):
                return f"cannot split arguments: no closing quotation after {name}="
            raw = word.group(0) if word else ""
            pos = word.end() if word else pos
            try:
                text = shlex.split(raw)[0] if raw else ""
            except ValueError as exc:
                return f"cannot split arguments: {exc}"
            ok, value, _ = _json(text)
            args[name] = value if ok else text
        if pos < len(rest) and not rest[pos].isspace():
            return f"{name}=: unexpected text after the value: {rest[pos : pos + 20]!r}"
    return args


def parse_command(
    line: str, params: Sequence[str] | None = None
) -> tuple[str, dict[str, Any]] | str:
    """``NAME {json}`` or ``NAME k=v …`` → (name, arguments); otherwise an error message.

    ``params``: the tool's parameter names, when known; with exactly one, ``NAME <json>`` is
    that parameter's value (an answer pasted as JSON) unless it is already the arguments object.
    """
    if len(line) > MAX_LINE:
        return f"input over {MAX_LINE} characters"
    line = line.strip()
    if not line:
        return "empty input"
    name, _, rest = line.partition(" ")
    rest = rest.strip()
    if not rest:
        return name, {}
    one = params is not None and len(params) == 1
    if rest[0] in "{[" or (one and rest[0] == '"'):  # a JSON string too, for one parameter
        return _whole(name, rest, params)
    pairs = _pairs(rest)
    return pairs if isinstance(pairs, str) else (name, pairs)


def _params(tools: Sequence[dict[str, Any]], name: str) -> list[str] | None:
    """The parameter names of tool ``name`` in an observation's tool list (None: not listed)."""
    for tool in tools:
        fn = tool.get("function", {})
        if fn.get("name") == name:
            return list((fn.get("parameters") or {}).get("properties", {}))
    return None


def play_episode(env: Env, *, task: str | int, console: Console) -> float:
    obs, info = env.reset(options={"task": task})
    for message in obs["messages"]:
        console.print(Panel(str(message["content"]), title=message["role"]))
    console.print(HELP)
    n = 0
    while True:
        try:
            line = console.input("[bold cyan]> [/]")
        except EOFError:
            console.print("input closed; episode abandoned")
            return 0.0
        if line.strip() in (":quit", ":q"):
            return 0.0
        if line.strip() == ":help":
            console.print(HELP)
            continue
        if line.strip() == ":tools":
            for tool in obs["tools"]:
                fn = tool["function"]
                console.print(
                    f"[cyan]{fn['name']}[/]({', '.join(fn['parameters'].get('properties', {}))}) — "
                    f"{fn['description'].splitlines()[0] if fn['description'] else ''}"
                )
            continue
        parsed = parse_command(line, _params(obs["tools"], line.strip().partition(" ")[0]))
        if isinstance(parsed, str):
            console.print(f"[red]{parsed}[/]")
            continue
        n += 1
        name, args = parsed
        call = {
            "id": f"human_{n}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        before = len(obs["messages"])
        obs, reward, terminated, truncated, info = env.step(
            {"role": "assistant", "content": "", "tool_calls": [call]}
        )
        for message in obs["messages"][before + 1 :]:
            console.print(
                Panel(
                    str(message.get("content")),
                    title=f"{message['role']} {message.get('name', '')}",
                )
            )
        if terminated or truncated:
            report = info.get("report", {})
            for c in report.get("checks", []):
                mark = "[green]✓[/]" if c["passed"] else "[red]✗[/]"
                console.print(f"{mark} {c['name']} {c['detail']}")
            console.print(
                f"[bold]episode over[/]: reward {reward} ({'submitted' if terminated else info.get('truncated_by')})"
            )
            return reward
