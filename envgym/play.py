"""``envgym play``: a person plays an episode in the terminal, calling tools by hand."""

from __future__ import annotations

import json
import shlex
from typing import Any

from rich.console import Console
from rich.panel import Panel

from envgym.core import Env

HELP = (
    "Type a tool call as  NAME {json arguments}  or  NAME key=value ...  (values may be JSON).\n"
    "Commands: :tools  :help  :quit"
)


def parse_command(line: str) -> tuple[str, dict[str, Any]] | str:
    """``NAME {json}`` or ``NAME k=v …`` → (name, arguments); otherwise an error message."""
    line = line.strip()
    if not line:
        return "empty input"
    name, _, rest = line.partition(" ")
    rest = rest.strip()
    if not rest:
        return name, {}
    if rest.startswith("{"):
        try:
            args = json.loads(rest)
        except json.JSONDecodeError as exc:
            return f"arguments are not valid JSON: {exc}"
        return (name, args) if isinstance(args, dict) else "arguments must be a JSON object"
    args = {}
    try:
        parts = shlex.split(rest)
    except ValueError as exc:
        return f"cannot split arguments: {exc}"
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq:
            return f"expected key=value, got {part!r}"
        try:
            args[key] = json.loads(value)
        except json.JSONDecodeError:
            args[key] = value
    return name, args


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
        parsed = parse_command(line)
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
