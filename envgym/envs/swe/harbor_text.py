"""The text files of an exported Harbor task: Dockerfile, solve.sh, test.sh, task.toml.

Every value of an instance is input, and each lands in text another program parses.  The rule
is that a value never changes that text's structure:

* **shell** (test.sh, solve.sh): every value goes through `quoting.shell_word` (``shlex.quote``
  after refusing NUL, which bash silently drops; a newline inside single quotes is part of the
  word), the test ids follow ``--`` (an id "--co" must not become a pytest option: collect-only
  exits 0, an always-1 verifier), the gold patch is a quoted heredoc whose delimiter does not
  occur in it;
* **Dockerfile**: one instruction per line and no continuation, so a value must be a single
  line: the instance id is checked (`instance.ID_PATTERN`), the image and URL against strict
  patterns, install commands may not contain control characters, end in a backslash (which
  would join the next instruction) or open a heredoc (``<<``, which would swallow the lines
  after it); the rest is refused with `InstanceError` naming the field;
* **TOML**: strings as JSON string literals (valid TOML basic strings, DEL escaped): the one
  `toml_value` of envgym/envs/harbor_export/quoting.py, shared with the bundle export.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from envgym.envs.harbor_export.quoting import shell_word, toml_value
from envgym.envs.swe.instance import InstanceError, SweInstance, check_instance_id
from envgym.envs.swe.patch import changed_files
from envgym.envs.swe.repo import GitError, check_clone_url

__all__ = ["WORKDIR", "dockerfile", "solve_sh", "task_toml", "test_sh", "toml_value"]

WORKDIR = "/testbed"
_OWNER_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")
_PYTHON = re.compile(r"\d{1,2}(?:\.\d{1,3}){0,2}")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")
_HEX40 = re.compile(r"[0-9a-fA-F]{40}")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _refuse(instance: SweInstance, field: str, why: str) -> InstanceError:
    return InstanceError(f"cannot be exported: {why}", where=instance.instance_id, field=field)


def check_exportable(instance: SweInstance) -> None:
    """`InstanceError` for a value the task files could not hold as data (module docstring)."""
    check_instance_id(instance.instance_id)
    if not _HEX40.fullmatch(instance.base_commit):
        raise _refuse(instance, "base_commit", "not a 40-hex commit sha")
    texts = {
        "patch": instance.patch,
        "test_patch": instance.test_patch,
        "repo": instance.repo,
        "repo_url": instance.repo_url,
        **{f"FAIL_TO_PASS[{n}]": t for n, t in enumerate(instance.fail_to_pass)},
        **{f"PASS_TO_PASS[{n}]": t for n, t in enumerate(instance.pass_to_pass)},
    }
    for field, text in texts.items():
        if "\0" in text:
            raise _refuse(instance, field, "holds a NUL character")


def recipe(instance: SweInstance) -> tuple[str | None, list[str]]:
    """(python version or None, install commands) from metadata["recipe"] when it says so."""
    given = instance.metadata.get("recipe")
    if isinstance(given, str):
        return None, [given]
    if isinstance(given, list) and all(isinstance(c, str) for c in given):
        return None, list(given)
    if isinstance(given, Mapping):
        install = given.get("install", [])
        commands = (
            [install] if isinstance(install, str) else [c for c in install if isinstance(c, str)]
        )
        python = given.get("python")
        return (str(python) if python else None), commands
    return None, ["pip install -e ."]


def clone_url(instance: SweInstance) -> str:
    """Where the container fetches a repository that is not bundled."""
    if instance.repo_url:
        url = instance.repo_url
    elif _OWNER_NAME.match(instance.repo):  # SWE-bench's "owner/name" means GitHub
        url = f"https://github.com/{instance.repo}.git"
    else:
        url = instance.repo
    try:
        return check_clone_url(url)
    except GitError as exc:
        raise _refuse(instance, "repo_url" if instance.repo_url else "repo", str(exc)) from None


def _run_lines(instance: SweInstance, commands: Sequence[str]) -> list[str]:
    lines: list[str] = []
    for command in commands:
        for line in command.splitlines():
            line = line.strip()
            if not line:
                continue
            if _CONTROL.search(line) or line.endswith("\\") or "<<" in line:
                raise _refuse(
                    instance,
                    "recipe",
                    f"install line {line[:80]!r} holds a control "
                    "character, ends in a backslash or opens a heredoc",
                )
            lines.append(f"RUN {line}")
    return lines


def dockerfile(instance: SweInstance, python_image: str, bundled: bool) -> str:
    python, install = recipe(instance)
    if python is not None and not _PYTHON.fullmatch(python):
        raise _refuse(instance, "recipe", f"python version {python[:40]!r} is not like 3.11")
    image = f"python:{python}-slim" if python else python_image
    if not _IMAGE.fullmatch(image):
        raise _refuse(instance, "python_image", f"{image[:80]!r} is not an image name")
    sha = instance.base_commit
    lines = [
        f"# envgym export of {check_instance_id(instance.instance_id)}: the repository at {sha}",
        f"FROM {image}",
        (
            "RUN apt-get update && apt-get install -y --no-install-recommends git ca-certificates"
            " && rm -rf /var/lib/apt/lists/*"
        ),
        f"WORKDIR {WORKDIR}",
        (
            "ENV GIT_AUTHOR_NAME=envgym GIT_AUTHOR_EMAIL=envgym@localhost"
            " GIT_COMMITTER_NAME=envgym GIT_COMMITTER_EMAIL=envgym@localhost"
        ),
    ]
    if bundled:
        message = shell_word("base " + sha)
        lines += [
            "ADD repo.tar /testbed/",
            f"RUN git init -q && git add -A -f && git commit -q -m {message} && git tag envgym-base",
        ]
    else:  # only the base commit: the fix's own commit must not be in the agent's history
        url = shell_word(clone_url(instance))
        fetch = f"git init -q && git fetch -q --depth 1 {url} {sha}"
        lines += [f"RUN {fetch} && git checkout -q --detach FETCH_HEAD && git tag envgym-base"]
    lines += _run_lines(instance, install)
    lines += ["RUN pip install --no-cache-dir pytest", ""]
    return "\n".join(lines)


def _heredoc_tag(text: str) -> str:
    tag = "ENVGYM_PATCH"
    while re.search(rf"^{tag}$", text, re.MULTILINE):
        tag += "_"
    return tag


def solve_sh(patch: str) -> str:
    head = [
        "#!/bin/bash",
        "# The gold patch of this task, applied to the repository.",
        "set -euo pipefail",
        f"cd {WORKDIR}",
    ]
    if not patch.strip():
        return "\n".join(head + ["# (no gold patch)", ""])
    tag = _heredoc_tag(patch)
    body = patch if patch.endswith("\n") else patch + "\n"
    return "\n".join(head + [f"git apply --whitespace=nowarn <<'{tag}'"]) + "\n" + body + tag + "\n"


def test_sh(instance: SweInstance) -> str:
    test_files = changed_files(instance.test_patch)
    ids = [*instance.fail_to_pass, *instance.pass_to_pass]
    if not ids:  # not validated yet: the test files the patch brings, else the whole suite
        ids = [f for f in test_files if f.endswith(".py")]
    quoted_files = " ".join(shell_word(f) for f in test_files)
    lines = [
        "#!/bin/bash",
        f"# Verifier of {check_instance_id(instance.instance_id)}: tests in, F2P + P2P run, reward out.",
        "set -uo pipefail",
        "mkdir -p /logs/verifier",
        'reward() { echo "$1" > /logs/verifier/reward.txt; exit 0; }',
        'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        f"cd {WORKDIR} || reward 0",
    ]
    if test_files:
        lines += [
            "# The hidden tests replace whatever the agent did to the same files.",
            f"for f in {quoted_files}; do",
            '  git checkout -q envgym-base -- "$f" 2>/dev/null || rm -f -- "$f"',
            "done",
        ]
    if instance.test_patch.strip():
        lines += ['git apply --whitespace=nowarn "$here/test.patch" || reward 0']
    lines += [
        f"tests=({' '.join(shell_word(t) for t in ids)})",
        'python -m pytest -rA -p no:cacheprovider -- "${tests[@]}"',
        "if [ $? -eq 0 ]; then reward 1; else reward 0; fi",
        "",
    ]
    return "\n".join(lines)


def task_toml(instance: SweInstance, sections: dict[str, dict[str, Any]]) -> str:
    repo_tag = instance.repo.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    metadata = {
        "author_name": "envgym",
        "category": "software-engineering",
        "tags": ["swe", "envgym", repo_tag],
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "base_commit": instance.base_commit,
        "source": str(instance.metadata.get("source", "envgym")),
    }
    out = ['version = "1.0"']
    for name, table in {"metadata": metadata, **sections}.items():
        out += ["", f"[{name}]"] + [f"{k} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(out) + "\n"
