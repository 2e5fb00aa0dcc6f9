"""Reading an LLM's reply: fenced code blocks, and static checks of the code it wrote.

A reply is untrusted text.  :func:`blocks` finds every fenced block (```lang label ...```),
tolerating a missing closing fence at the end of a cut-off reply.  Fences are markdown's: a
fence is a line of its own, so code that holds three backticks inside a line (a string, a comment)
does not end its block.  The checks say, in words
the model can act on, why a block is not usable yet: it does not parse, a tool lacks type
hints, it imports outside the standard library, it defines no function of the needed shape.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# An opening fence starts a line; the closing fence is a line holding only ``` (or the text ends).
_FENCE = re.compile(
    r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*([\w-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)",
    re.DOTALL | re.MULTILINE,
)
ALLOWED_TOOL_IMPORTS = frozenset(sys.stdlib_module_names) | {"envgym", "envgym.runtime"}


@dataclass(frozen=True)
class Block:
    lang: str  # "python", "json", "" ...
    label: str  # the word after the language: "tools", "solution", "verifier", "task", ""
    code: str


def blocks(text: str) -> list[Block]:
    return [
        Block(m.group(1).lower(), m.group(2).lower(), m.group(3).strip("\n"))
        for m in _FENCE.finditer(text or "")
    ]


def pick(
    found: list[Block],
    label: str,
    *,
    lang: str = "python",
    needle: str = "",
    labelled_only: bool = False,
) -> Block | None:
    """The block labelled ``label``; else (unless ``labelled_only``) the first ``lang`` block
    containing ``needle``."""
    for b in found:
        if b.label == label:
            return b
    if labelled_only:
        return None
    for b in found:
        if (b.lang == lang or (lang == "python" and b.lang in ("", "py"))) and needle in b.code:
            return b
    return None


def pick_distinct(found: list[Block], roles: dict[str, str]) -> dict[str, Block | None]:
    """One *different* python block per role (``{"solution": "solve", "verifier": "verify"}``).

    A block labelled with a role takes it; an unlabelled python block goes to the role whose
    function name (``solve``/``verify``) it defines, else to the first role still open, in reply
    order.  A block never serves two roles: two unlabelled blocks are a solution and a verifier,
    not the first block twice.
    """
    chosen: dict[str, Block | None] = {role: None for role in roles}
    used: set[int] = set()

    def take(role: str, candidates: list[tuple[int, Block]], fits: Callable[[Block], bool]) -> None:
        for i, b in candidates:
            if i not in used and fits(b):
                chosen[role] = b
                used.add(i)
                return

    numbered = list(enumerate(found))
    for role in roles:
        take(role, numbered, lambda b, r=role: b.label == r)
    spare = [
        (i, b)
        for i, b in numbered
        if b.label in ("", "py", "python") and b.lang in ("python", "py", "") and "def " in b.code
    ]
    for role, fn in roles.items():  # by the function a spare block defines
        if chosen[role] is None:
            take(role, spare, lambda b, f=fn: any(x.name == f for x in functions(b.code)))
    for role in roles:  # then in reply order
        if chosen[role] is None:
            take(role, spare, lambda b: True)
    return chosen


_SQL_START = re.compile(r"^\s*(create|insert|drop|begin|pragma|replace|update)\b", re.IGNORECASE)


def as_sql(block: Block) -> str | None:
    """The block as an SQL script when it is one (a ```sql block, or SQL in a python block)."""
    lines = [
        x for x in block.code.splitlines() if x.strip() and not x.strip().startswith(("#", "--"))
    ]
    if block.lang == "sql" or (
        lines and _SQL_START.match(lines[0]) and parse_problem(block.code, "x") is not None
    ):
        return "\n".join(
            "--" + x.strip()[1:] if x.strip().startswith("#") else x
            for x in block.code.splitlines()
        )
    return None


def parse_problem(code: str, filename: str) -> str | None:
    try:
        ast.parse(code, filename=filename)
    except SyntaxError as exc:
        return f"{filename} does not parse: line {exc.lineno}: {exc.msg}"
    return None


def functions(code: str) -> list[ast.FunctionDef]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


def tools_problems(code: str) -> list[str]:
    """Why ``code`` cannot be a tools.py yet (empty: it can be loaded and described)."""
    problem = parse_problem(code, "tools.py")
    if problem:
        return [problem]
    out = []
    tree = ast.parse(code)
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for name in names:
            if name.split(".")[0] not in ALLOWED_TOOL_IMPORTS and name not in ALLOWED_TOOL_IMPORTS:
                out.append(
                    f"tools.py line {node.lineno}: imports {name!r}; tools may import only the standard "
                    "library and envgym.runtime"
                )
    public = [f for f in functions(code) if not f.name.startswith("_")]
    if not public:
        out.append("tools.py defines no public function (a tool is a top-level function)")
    for f in public:
        args = f.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if a.annotation is None:
                out.append(
                    f"tool {f.name}: parameter {a.arg!r} needs a type hint (str, int, float, bool, list, dict)"
                )
        if args.vararg or args.kwarg:
            out.append(f"tool {f.name}: *args/**kwargs cannot be described to a model")
    return out


def two_argument_function(code: str, prefer: str) -> str | None:
    """The name of the function a solution/verifier block defines (``prefer`` if present)."""
    fns = [f for f in functions(code) if len(f.args.args) == 2 and not f.name.startswith("_")]
    for f in fns:
        if f.name == prefer:
            return f.name
    return fns[0].name if fns else None


def task_json(found: list[Block]) -> tuple[dict[str, Any] | None, str]:
    """The task object (prompt + metadata) from a ```json task``` block, or why not."""
    block = pick(found, "task", lang="json", needle="prompt")
    if block is None:
        return None, 'no ```json task``` block with a "prompt"'
    try:
        data = json.loads(block.code)
    except json.JSONDecodeError as exc:
        return None, f"the task block is not JSON: {exc.msg} (line {exc.lineno})"
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("prompt"), str)
        or not data["prompt"].strip()
    ):
        return None, 'the task JSON needs a non-empty string "prompt"'
    meta = data.get("metadata", {})
    if not isinstance(meta, dict):
        return None, 'the task\'s "metadata" must be a JSON object'
    return {"prompt": data["prompt"].strip(), "metadata": meta}, ""


def witnesses_json(found: list[Block]) -> tuple[list[dict[str, Any]] | None, str]:
    """The per-rule witnesses from a ```json witnesses``` block (docs/CHECK.md), or why not.

    Format: ``[{"rule": "<check name>", "submission": {<submit tool arguments>}, "note": "..."}, ...]``.
    """
    block = next((b for b in found if b.label == "witnesses"), None)
    if block is None:
        return None, "no ```json witnesses``` block (one violating submission per verifier check)"
    try:
        data = json.loads(block.code)
    except json.JSONDecodeError as exc:
        return None, f"the witnesses block is not JSON: {exc.msg} (line {exc.lineno})"
    if isinstance(data, dict) and isinstance(data.get("witnesses"), list):
        data = data["witnesses"]
    if not isinstance(data, list) or not data:
        return None, "the witnesses block must be a non-empty JSON list"
    out = []
    for i, w in enumerate(data):
        if (
            not isinstance(w, dict)
            or not isinstance(w.get("rule"), str)
            or not w["rule"].strip()
            or not isinstance(w.get("submission"), dict)
        ):
            return None, (
                f'witness {i} needs a string "rule" (a check name) and an object "submission" '
                "(the arguments of submit_result)"
            )
        out.append(
            {
                "rule": w["rule"].strip(),
                "submission": w["submission"],
                "note": str(w.get("note", ""))[:500],
            }
        )
    return out, ""
