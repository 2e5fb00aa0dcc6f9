"""One built Python environment (``PythonEnv``) and how to run a command in it, jailed.

Layout inside the jail, the same for every backend and every command:

* ``/repo`` — the repository (a setup copy while installing, an instance's workspace when
  testing), writable;
* ``/venv`` — the environment, writable while it is built, read-only afterwards (a test suite
  or an agent cannot damage an environment other instances share).

Fixed jail paths (not the host paths) are what make one cached environment serve every checkout
of a repository: the editable install records ``/repo`` (so the tests import the workspace's
source, whichever host folder it lives in), and the console scripts' shebangs name
``/venv/bin/python`` (the envgym cache builds an entry in a scratch folder and renames it into
place, so a host path baked into a shebang would be stale).  The venv's interpreter is a symlink
to the host's base interpreter, whose prefix every jail mounts read-only at the same path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.envs.swe.recipe import Recipe
from envgym.sandbox.command_jail import CommandLimits, CommandResult, Mount, run_command

JAIL_REPO = "/repo"
JAIL_VENV = "/venv"
DOCKER_IMAGE = "envgym-sandbox:latest"
BACKENDS = ("bwrap", "docker")
_BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class PythonEnv:
    """One cached environment per repository × version × recipe (docs/SWE.md)."""

    backend: str  # "bwrap" | "docker"
    key: str  # cache key (the entry's folder name ends with it)
    venv: Path  # host path of the venv; every jail mounts it at JAIL_VENV
    image: str | None  # docker: the image the commands run in
    recipe: Recipe

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "key": self.key,
            "venv": str(self.venv),
            "image": self.image,
            "recipe": self.recipe.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PythonEnv:
        return cls(
            backend=str(data["backend"]),
            key=str(data["key"]),
            venv=Path(data["venv"]),
            image=data.get("image"),
            recipe=Recipe.from_json(data["recipe"]),
        )


def command_env(recipe: Recipe, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a recipe's commands see: the venv first on PATH, then the recipe's own.

    Relative ``PYTHONPATH`` entries ("src") are made absolute under ``/repo`` so that a test that
    changes directory still imports the workspace's source.
    """
    env = {
        "PATH": f"{JAIL_VENV}/bin:{_BASE_PATH}",
        "VIRTUAL_ENV": JAIL_VENV,
        "PYTHONDONTWRITEBYTECODE": "1",  # keep __pycache__ out of the workspace (and its diff)
        "PIP_NO_INPUT": "1",
        "PYTHONUTF8": "1",
    }
    for name, value in recipe.env.items():
        if name == "PYTHONPATH":
            value = ":".join(
                p if p.startswith("/") else f"{JAIL_REPO}/{p}".rstrip("/.")
                for p in value.split(":")
                if p
            )
        env[name] = value
    env.update(extra or {})
    return env


def layout_mounts(venv: Path, repo: Path, *, venv_writable: bool = False) -> list[Mount]:
    """The jail layout of the module docstring: any command that uses the env needs these."""
    return [Mount(repo, JAIL_REPO, writable=True), Mount(venv, JAIL_VENV, writable=venv_writable)]


def run_in_env(
    venv: Path,
    recipe: Recipe,
    repo: Path,
    argv: Sequence[str],
    *,
    backend: str = "bwrap",
    image: str | None = None,
    network: bool = False,
    venv_writable: bool = False,
    timeout_s: float = 900.0,
    extra_mounts: Sequence[Mount] = (),
    extra_env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run ``argv`` with ``repo`` at /repo (writable) and ``venv`` at /venv, in /repo."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    mounts = [*layout_mounts(venv, repo, venv_writable=venv_writable), *extra_mounts]
    return run_command(
        list(argv),
        mounts=mounts,
        workdir=JAIL_REPO,
        env=command_env(recipe, extra_env),
        network=network,
        limits=CommandLimits(timeout_s=timeout_s),
        backend=backend,
        image=(image or DOCKER_IMAGE) if backend == "docker" else None,
    )


def run_in(
    env: PythonEnv,
    repo: Path,
    argv: Sequence[str],
    *,
    timeout_s: float = 900.0,
    extra_mounts: Sequence[Mount] = (),
    extra_env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run ``argv`` in a built environment (network off, venv read-only): tests, agent commands."""
    return run_in_env(
        env.venv,
        env.recipe,
        repo,
        argv,
        backend=env.backend,
        image=env.image,
        timeout_s=timeout_s,
        extra_mounts=extra_mounts,
        extra_env=extra_env,
    )


def load_env(path: Path) -> PythonEnv:
    return PythonEnv.from_json(json.loads(path.read_text())["env"])
