"""Loading tasks in MCPMark's layout: ``tasks/<service>/<category>/<task>/``.

Each task folder holds MCPMark's three files (github.com/eval-sys/mcpmark, ``docs/datasets/task.md``):

* ``meta.json`` — ``task_id``, ``task_name``, ``category_id``, ``category_name``, ``description``,
  ``author``, ``created_at``, ``difficulty``, ``tags``, ``mcp`` (the services it uses) and
  ``meta_data`` (MCPMark: ``stateType``, ``stateContent``, ``stateUrl``, ``stateOriginalUrl``);
* ``description.md`` — the instruction the agent gets;
* ``verify.py`` — run as a script against the final state; exit code 0 means solved.  As in
  MCPMark, it finds the state through environment variables: ``FILESYSTEM_TEST_DIR`` (MCPMark's
  own name) for the filesystem service, and, by the same convention, ``GIT_TEST_REPO`` and
  ``SQLITE_TEST_DB`` for the git and sqlite services this suite adds.

A category folder may hold ``verify_prelude.py`` (envgym's addition): helpers and expected data
its tasks' verifiers share, prepended to each ``verify.py`` when the task is loaded, so the
verifier that runs is still one self-contained script (MCPMark's own tasks have none).

plus, for envgym, ``gold.json``: the gold solution as a list of MCP tool calls
(``{"tool": NAME, "arguments": {...}}``, ``{state_dir}`` in a string is the episode's state
folder).  The initial state of a category lives in ``initial_state/<service>/<category>/``
(:mod:`envgym.envs.mcp_suite.snapshot`).  MCPMark's own tasks carry no gold plan: they load (and run
with a model) but cannot be ``check``ed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REQUIRED_META = (
    "task_id",
    "task_name",
    "category_id",
    "category_name",
    "description",
    "author",
    "created_at",
    "difficulty",
    "tags",
    "mcp",
)
# The variable verify.py reads, and where it points inside the episode's state folder.
STATE_ENV = {
    "filesystem": ("FILESYSTEM_TEST_DIR", ""),
    "git": ("GIT_TEST_REPO", "repo"),
    "sqlite": ("SQLITE_TEST_DB", "db.sqlite"),
}
ROOT = Path(__file__).resolve().parent
TASKS_DIR = ROOT / "tasks"
STATE_DIR = ROOT / "initial_state"
PRELUDE = "verify_prelude.py"  # in a category folder: prepended to each of its tasks' verify.py
# Not data: an installer byte-compiles the .py files it installs (verify.py, verify_prelude.py,
# initial files), leaving __pycache__ folders beside them that are neither tasks nor state.
SKIPPED_NAMES = frozenset({"__pycache__"})


def is_data(relative: Path) -> bool:
    """Whether ``relative`` (a path inside the tasks or initial-state folder) is suite data."""
    return not SKIPPED_NAMES.intersection(relative.parts)


class LayoutError(ValueError):
    """A task folder that does not follow the layout; names the file and what is wrong."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


@dataclass(frozen=True)
class McpMarkTask:
    """One task, read into memory (the verifier runs from this copy, never from disk again)."""

    folder: Path
    service: str
    category: str
    meta: dict[str, Any]
    description: str
    verify_source: str
    gold: tuple[dict[str, Any], ...] | None = None  # None: no gold plan (MCPMark's own tasks)
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def id(self) -> str:
        return f"{self.service}/{self.category}/{self.meta['task_id']}"

    @property
    def difficulty(self) -> int:
        return difficulty_level(self.meta["difficulty"])

    @property
    def verify_digest(self) -> str:
        return hashlib.sha256(self.verify_source.encode()).hexdigest()


def difficulty_level(value: Any) -> int:
    """MCPMark writes ``"L1"``…``"L3"`` (or words); envgym wants 1, 2, 3."""
    words = {"easy": 1, "medium": 2, "hard": 3}
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    text = str(value).strip().lower()
    if text in words:
        return words[text]
    if text[:1] == "l" and text[1:].isdigit() and int(text[1:]) >= 1:
        return int(text[1:])
    raise ValueError(f"difficulty {value!r} is not L1..Ln, a positive integer or easy/medium/hard")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LayoutError(path, "required file is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LayoutError(path, f"not valid JSON: {exc}") from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LayoutError(path, "required file is missing") from None
    except UnicodeDecodeError as exc:
        raise LayoutError(path, f"not UTF-8 text: {exc}") from None


def load_task(
    folder: Path, *, service: str | None = None, category: str | None = None
) -> McpMarkTask:
    """Read one task folder; the service and category default to its two parent folders."""
    folder = Path(folder)
    service = service or folder.parent.parent.name
    category = category or folder.parent.name
    meta = _read_json(folder / "meta.json")
    if not isinstance(meta, dict):
        raise LayoutError(folder / "meta.json", "must be a JSON object")
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise LayoutError(folder / "meta.json", f"missing fields: {', '.join(missing)}")
    if meta["task_id"] != folder.name:
        raise LayoutError(
            folder / "meta.json",
            f"task_id {meta['task_id']!r} is not the folder name {folder.name!r}",
        )
    if not isinstance(meta["mcp"], list) or service not in meta["mcp"]:
        raise LayoutError(
            folder / "meta.json", f"mcp {meta['mcp']!r} does not list the service {service!r}"
        )
    if not isinstance(meta["tags"], list):
        raise LayoutError(folder / "meta.json", "tags must be a list")
    try:
        difficulty_level(meta["difficulty"])
    except ValueError as exc:
        raise LayoutError(folder / "meta.json", str(exc)) from None
    description = _read_text(folder / "description.md").strip()
    if not description:
        raise LayoutError(folder / "description.md", "is empty")
    verify_source = _read_text(folder / "verify.py")
    prelude = folder.parent / PRELUDE
    sources = [(folder / "verify.py", verify_source)]
    if prelude.is_file():
        sources.append((prelude, _read_text(prelude)))
        verify_source = (
            f"{sources[1][1].rstrip()}\n\n\n# -- {folder.name}/verify.py --\n{verify_source}"
        )
    for path, text in sources:  # each part on its own first, so an error names its file and line
        try:
            compile(text, str(path), "exec")
        except SyntaxError as exc:
            raise LayoutError(path, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    gold = None
    if (folder / "gold.json").exists():
        gold = _gold(folder / "gold.json")
    return McpMarkTask(
        folder=folder,
        service=service,
        category=category,
        meta=meta,
        description=description,
        verify_source=verify_source,
        gold=gold,
        tags=tuple(str(t) for t in meta["tags"]),
    )


def _gold(path: Path) -> tuple[dict[str, Any], ...]:
    plan = _read_json(path)
    if not isinstance(plan, list) or not plan:
        raise LayoutError(path, "must be a non-empty list of {tool, arguments} calls")
    for i, step in enumerate(plan):
        if not (
            isinstance(step, dict)
            and isinstance(step.get("tool"), str)
            and isinstance(step.get("arguments", {}), dict)
            and set(step) <= {"tool", "arguments"}
        ):
            raise LayoutError(path, f'call {i} must be {{"tool": NAME, "arguments": {{...}}}}')
    return tuple({"tool": s["tool"], "arguments": s.get("arguments", {})} for s in plan)


def load_category(service: str, category: str, *, tasks_dir: Path = TASKS_DIR) -> list[McpMarkTask]:
    """Every task of one category, sorted by task id."""
    folder = tasks_dir / service / category
    if not folder.is_dir():
        raise LayoutError(folder, "no such category folder")
    tasks = [
        load_task(d, service=service, category=category)
        for d in sorted(folder.iterdir())
        if d.is_dir() and is_data(Path(d.name))
    ]
    if not tasks:
        raise LayoutError(folder, "the category has no tasks")
    return tasks


def categories(tasks_dir: Path = TASKS_DIR) -> list[tuple[str, str]]:
    """(service, category) pairs present under ``tasks_dir``."""
    return sorted(
        (s.name, c.name)
        for s in tasks_dir.iterdir()
        if s.is_dir() and is_data(Path(s.name))
        for c in s.iterdir()
        if c.is_dir() and is_data(Path(c.name))
    )


def bind_state(value: Any, state_dir: Path) -> Any:
    """``value`` with ``{state_dir}`` filled in, in every string (gold-plan arguments)."""
    if isinstance(value, str):
        return value.replace("{state_dir}", str(state_dir))
    if isinstance(value, list):
        return [bind_state(v, state_dir) for v in value]
    if isinstance(value, dict):
        return {k: bind_state(v, state_dir) for k, v in value.items()}
    return value
