"""Repairs of a failed setup: rules first, then (optionally) a model's JSON recipe patch.

A repair takes the current :class:`Recipe`, the failed command and its output tail, and returns
a new recipe (with a note saying what changed and why) or ``None`` when it has nothing to offer.
Rules are cheap and deterministic; each applies at most once per argument (the recipe's notes
and commands say what was tried), so the setup loop cannot cycle on them.

The model (``RepairModel``: any OpenAI-compatible chat endpoint) is asked for a *patch* in JSON:

    {"install": [...], "env": {...}, "test_command": [...], "reason": "..."}

every key optional, ``install`` replacing the whole list.  Replies are validated strictly
(:func:`parse_patch`): anything else is rejected with a reason and the loop goes on.  Commands
from the model are as untrusted as the repository: they run in the same jail.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from envgym.envs.swe.recipe import ADDOPTS_PLUGINS, Recipe

# Import names whose distribution is named differently (a wrong guess only costs one failed step).
DIST_NAMES = {
    "yaml": "PyYAML",
    "PIL": "Pillow",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python-headless",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "attr": "attrs",
    "jwt": "PyJWT",
    "dotenv": "python-dotenv",
    "Crypto": "pycryptodome",
    "serial": "pyserial",
    "OpenSSL": "pyOpenSSL",
    "zmq": "pyzmq",
    "git": "GitPython",
    "docx": "python-docx",
    "pkg_resources": "setuptools",
    "google": "protobuf",
    "magic": "python-magic",
    "skimage": "scikit-image",
    "Levenshtein": "python-Levenshtein",
}
MARKER_PLUGINS = {
    "asyncio": "pytest-asyncio",
    "django_db": "pytest-django",
    "timeout": "pytest-timeout",
    "benchmark": "pytest-benchmark",
    "mpl_image_compare": "pytest-mpl",
    "flaky": "flaky",
    "trio": "pytest-trio",
    "anyio": "anyio",
    "httpx_mock": "pytest-httpx",
}
PATCH_KEYS = frozenset({"install", "env", "test_command", "reason"})
MAX_COMMANDS, MAX_COMMAND_CHARS = 40, 2000
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_ENV = frozenset({"PATH", "VIRTUAL_ENV", "HOME"})  # the jail's layout depends on them


@dataclass(frozen=True)
class Failure:
    """What failed: the step's command (a shell line or a joined argv), its output tail, the repo."""

    command: str
    output: str
    repo_dir: Path
    is_install: bool  # an install command (else the collection smoke test)


def rule_repair(recipe: Recipe, failure: Failure) -> Recipe | None:
    """The first rule that applies and has not been tried yet, or None."""
    for rule in (_missing_plugin, _missing_module, _no_wheel, _editable_to_plain):
        fixed = rule(recipe, failure)
        if fixed is not None and fixed.key() != recipe.key():
            return fixed
    return None


def _add_install(recipe: Recipe, failure: Failure, command: str, why: str) -> Recipe | None:
    """Insert ``command`` before the failed install step (or append it after a failed smoke test)."""
    if command in recipe.install:
        return None  # already tried: this rule has nothing new
    install = list(recipe.install)
    at = (
        install.index(failure.command)
        if failure.is_install and failure.command in install
        else len(install)
    )
    install.insert(at, command)
    return replace(recipe, install=tuple(install)).noted(f"repair: {why}: added {command!r}")


def _missing_plugin(recipe: Recipe, failure: Failure) -> Recipe | None:
    out = failure.output
    plugins: list[str] = []
    for match in re.finditer(r"unrecognized arguments: (.+)", out):
        for flag in match.group(1).split():
            flag = flag.split("=", 1)[0]
            plugin = ADDOPTS_PLUGINS.get(flag) or next(
                (
                    p
                    for f, p in ADDOPTS_PLUGINS.items()
                    if f.startswith("--") and flag.startswith(f)
                ),
                None,
            )
            if plugin and plugin not in plugins:
                plugins.append(plugin)
    for match in re.finditer(r"Missing required plugins: (.+)", out):
        plugins += [p.strip(" ,'\"") for p in match.group(1).split(",") if p.strip(" ,'\"")]
    for match in re.finditer(r"'(\w+)' not found in `markers` configuration option", out):
        if match.group(1) in MARKER_PLUGINS:
            plugins.append(MARKER_PLUGINS[match.group(1)])
    if not plugins:
        return None
    command = "python -m pip install " + " ".join(shlex.quote(p) for p in dict.fromkeys(plugins))
    return _add_install(recipe, failure, command, "pytest plugins the configuration needs")


def _missing_module(recipe: Recipe, failure: Failure) -> Recipe | None:
    match = re.search(r"No module named '([\w.]+)'", failure.output)
    if not match:
        return None
    top = match.group(1).split(".")[0]
    if _is_own_module(failure.repo_dir, top):
        # The project's own package is not importable: installing a same-named registry package
        # would be wrong; put the source on the path instead.
        src = "src" if (failure.repo_dir / "src" / top).exists() else "."
        if recipe.env.get("PYTHONPATH") == src:
            return None
        return replace(recipe, env={**recipe.env, "PYTHONPATH": src}).noted(
            f"repair: the project's own module {top!r} is not importable: PYTHONPATH={src}"
        )
    dist = DIST_NAMES.get(top, top)
    if (
        failure.is_install
        and "pip install" in failure.command
        and "--no-build-isolation" not in failure.command
    ):
        # A setup.py importing a module at build time: isolation hides the venv, so install the
        # module (and the build tools) into the venv and build without isolation.
        tools = f"python -m pip install setuptools wheel {shlex.quote(dist)}"
        install = list(recipe.install)
        at = install.index(failure.command) if failure.command in install else len(install)
        install[at : at + 1] = [
            tools,
            failure.command.replace("pip install", "pip install --no-build-isolation", 1),
        ]
        return replace(recipe, install=tuple(install)).noted(
            f"repair: the build imports {top!r}: installed it with setuptools/wheel, build without isolation"
        )
    return _add_install(
        recipe, failure, f"python -m pip install {shlex.quote(dist)}", f"module {top!r} missing"
    )


def _is_own_module(repo_dir: Path, name: str) -> bool:
    return any(
        (base / name).is_dir() or (base / f"{name}.py").is_file()
        for base in (repo_dir, repo_dir / "src")
    )


def _no_wheel(recipe: Recipe, failure: Failure) -> Recipe | None:
    if (
        "invalid command 'bdist_wheel'" in failure.output
        or "No module named 'setuptools'" in failure.output
    ):
        return _add_install(
            recipe, failure, "python -m pip install setuptools wheel", "build tools missing"
        )
    return None


def _editable_to_plain(recipe: Recipe, failure: Failure) -> Recipe | None:
    if not failure.is_install or " -e " not in failure.command:
        return None
    # A project whose backend cannot install editable: install it normally, and import the
    # workspace's source ahead of the installed copy (so the tests still test the checkout).
    plain = failure.command.replace(" -e ", " ", 1)
    src = "src" if (failure.repo_dir / "src").is_dir() else "."
    install = [plain if c == failure.command else c for c in recipe.install]
    return replace(recipe, install=tuple(install), env={**recipe.env, "PYTHONPATH": src}).noted(
        f"repair: editable install failed: non-editable install with PYTHONPATH={src}"
    )


# -- the model ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepairModel:
    """An OpenAI-compatible chat endpoint asked for recipe patches."""

    base_url: str  # e.g. "http://127.0.0.1:8000/v1"
    model: str
    api_key_env: str = "OPENAI_API_KEY"  # the variable holding the key ("" or unset: no key sent)
    timeout_s: float = 120.0
    max_tokens: int = 1024

    def ask(self, recipe: Recipe, failure: Failure) -> str:
        """The model's raw reply text; httpx errors propagate (the caller records them)."""
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = {
            "model": self.model,
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": _prompt(recipe, failure)},
            ],
        }
        response = httpx.post(
            self.base_url.rstrip("/") + "/chat/completions",
            json=body,
            headers=headers,
            timeout=self.timeout_s,
        )
        response.raise_for_status()
        return str(response.json()["choices"][0]["message"]["content"] or "")


SYSTEM_PROMPT = """You repair the setup of a Python project's test environment.
Commands run with `sh -c` in the repository, inside a virtualenv whose bin/ is first on PATH.
Reply with ONE JSON object and nothing else, with any of these keys:
  "install": list of shell command strings (replaces the whole install list),
  "env": object of environment variables (string values) to set,
  "test_command": list of argv strings (the pytest invocation prefix),
  "reason": one sentence."""


def _prompt(recipe: Recipe, failure: Failure) -> str:
    current = {k: v for k, v in recipe.to_json().items() if k != "notes"}
    return (
        f"Current recipe:\n{json.dumps(current, indent=1)}\n\nThis step failed:\n{failure.command}\n\n"
        f"Last output:\n{failure.output[-3000:]}"
    )


def parse_patch(reply: str, recipe: Recipe) -> tuple[Recipe | None, str]:
    """(patched recipe, "") or (None, why the reply was rejected).  Never raises."""
    text = reply.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fenced:
        text = fenced.group(1).strip()
    try:
        patch = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return None, f"reply is not JSON ({type(exc).__name__}: {str(exc)[:80]})"
    if not isinstance(patch, dict):
        return None, f"reply is a JSON {type(patch).__name__}, not an object"
    unknown = sorted(set(patch) - PATCH_KEYS)
    if unknown:
        return None, f"unknown keys {unknown}; allowed: {sorted(PATCH_KEYS)}"
    changes: dict[str, Any] = {}
    checks: dict[str, Callable[[Any], str]] = {
        "install": _check_commands,
        "test_command": _check_argv,
        "env": _check_env,
    }
    for name, check in checks.items():
        if name in patch:
            problem = check(patch[name])
            if problem:
                return None, f"{name}: {problem}"
            changes[name] = tuple(patch[name]) if name != "env" else {**recipe.env, **patch[name]}
    reason = patch.get("reason", "")
    if not isinstance(reason, str):
        return None, "reason: not a string"
    if not changes:
        return None, "the patch changes nothing"
    patched = replace(recipe, **changes)
    if patched.key() == recipe.key():
        return None, "the patch changes nothing"
    return patched.noted(
        f"model repair: {reason[:300] or 'no reason given'} ({', '.join(sorted(changes))})"
    ), ""


def _check_commands(value: Any) -> str:
    if not isinstance(value, list):
        return f"not a list of command strings (got {type(value).__name__})"
    if len(value) > MAX_COMMANDS:
        return f"more than {MAX_COMMANDS} commands"
    for item in value:
        if not isinstance(item, str) or not item.strip():
            return f"every command must be a non-empty string (got {item!r:.60})"
        if len(item) > MAX_COMMAND_CHARS or "\x00" in item:
            return "a command is too long or has a NUL byte"
    return ""


def _check_argv(value: Any) -> str:
    problem = _check_commands(value)
    return problem or ("empty argv" if not value else "")


def _check_env(value: Any) -> str:
    if not isinstance(value, Mapping):
        return f"not an object (got {type(value).__name__})"
    for name, item in value.items():
        if not _ENV_NAME.match(name) or name in _RESERVED_ENV:
            return f"variable name {name!r} is invalid or reserved"
        if not isinstance(item, str) or "\x00" in item or len(item) > MAX_COMMAND_CHARS:
            return f"value of {name} is not a plain string"
    return ""
