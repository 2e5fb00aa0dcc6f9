"""The environment-setup agent: detect → install → smoke test → repair, cached per repo/version.

DeepSeek-V3.2 (§3.2.3, "Code Agent") builds its issue-resolution environments with "an automated
environment-setup agent" that "handles package installation, dependency resolution, and test
execution".  This is that agent for pure-Python repositories:

1. ``detect_recipe`` reads the packaging files (``envgym/envs/swe/recipe.py``);
2. a venv is created with the host interpreter and the recipe's install commands run one by one
   in a jail with the network on (``envgym/envs/swe/pyenv.py`` for the layout), on a *copy* of the
   repository (a malicious setup.py can only touch that copy and the venv);
3. the smoke test ``pytest --collect-only -q`` runs with the network off and must collect at
   least one test;
4. a failed step goes to the repairs (``envgym/envs/swe/repair.py``): rules first, then the optional
   model, at most ``max_repairs`` model calls; the loop resumes from the first install command
   that has not already succeeded (pip installs are idempotent; the venv is kept).

The built environment is cached under ``<envgym cache>/swe/envs`` per repo key × version ×
detected recipe × backend with ``built_once`` (concurrent callers build it once).  Failures are
not cached: a network blip or a better model should get another chance.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envgym.cache import built_once, cache_root
from envgym.envs.swe.pyenv import DOCKER_IMAGE, JAIL_VENV, PythonEnv, load_env, run_in_env
from envgym.envs.swe.recipe import HOST_PYTHON, Recipe, detect_recipe
from envgym.envs.swe.repair import Failure, RepairModel, parse_patch, rule_repair
from envgym.sandbox.bwrap import python_executable
from envgym.sandbox.command_jail import CommandResult

__all__ = ["PythonEnv", "RepairModel", "SetupResult", "SetupStep", "ensure_env", "env_folder"]

MARKER = "env.json"
MAX_RULE_REPAIRS = 8  # rules never repeat themselves; this only bounds a pathological chain
TAIL_CHARS = 4000


@dataclass(frozen=True)
class SetupStep:
    name: str  # "venv", "install 2/4", "smoke test", "rule repair", "model repair", ...
    command: str
    returncode: int | None
    tail: str  # the last TAIL_CHARS of output (or the repair's note / rejection reason)
    duration_s: float


@dataclass(frozen=True)
class SetupResult:
    env: PythonEnv | None
    recipe: Recipe
    ok: bool
    reason: str  # "" when ok; else names the failing step
    log: tuple[SetupStep, ...]
    cached: bool


class _SetupFailed(Exception):
    def __init__(self, result: SetupResult) -> None:
        super().__init__(result.reason)
        self.result = result


def env_folder(repo_key: str, version: str, recipe: Recipe, backend: str) -> Path:
    """The cache entry's folder for this repository × version × (detected) recipe × backend."""
    digest = hashlib.sha256(
        f"{repo_key}\0{version}\0{recipe.key()}\0{backend}".encode()
    ).hexdigest()[:20]
    slug = re.sub(r"[^\w.-]+", "_", repo_key.rstrip("/").rsplit("/", 1)[-1])[:40] or "repo"
    # The version comes from an instance (input): it names part of a folder, never a path.
    tag = re.sub(r"[^\w.-]+", "_", version)[:40].strip(".") or "any"
    return cache_root() / "swe" / "envs" / f"{slug}-{tag}-{digest}"


def ensure_env(
    repo_dir: Path,
    *,
    repo_key: str,
    version: str,
    backend: str = "bwrap",
    model: RepairModel | None = None,
    max_repairs: int = 3,
    step_timeout_s: float = 900.0,
    recipe: Recipe | None = None,
) -> SetupResult:
    """The environment for ``repo_dir`` (a checkout), built once and cached; never raises for
    anything the repository does (a failed setup is ``SetupResult(ok=False, reason=...)``).

    ``recipe`` overrides detection (e.g. a recipe recorded from an earlier run).
    """
    repo_dir = Path(repo_dir)
    detected = recipe or detect_recipe(repo_dir)
    if detected.python != HOST_PYTHON:
        return SetupResult(
            None,
            detected,
            False,
            f"recipe wants Python {detected.python}; only the host "
            f"interpreter ({HOST_PYTHON}) is available",
            (),
            False,
        )
    folder = env_folder(repo_key, version, detected, backend)
    if (folder / MARKER).is_file():
        return _load_result(folder, cached=True)
    fresh: list[SetupResult] = []

    def build(target: Path) -> None:
        result = _build(
            repo_dir, target, folder, detected, backend, model, max_repairs, step_timeout_s
        )
        if not result.ok:
            raise _SetupFailed(result)
        fresh.append(result)

    try:
        built_once(folder, build, marker=MARKER)
    except _SetupFailed as failed:
        return failed.result
    return fresh[0] if fresh else _load_result(folder, cached=True)


def _load_result(folder: Path, *, cached: bool) -> SetupResult:
    data = json.loads((folder / MARKER).read_text())
    env = load_env(folder / MARKER)
    log = tuple(SetupStep(**step) for step in data.get("log", ()))
    return SetupResult(env, env.recipe, True, "", log, cached)


def _build(
    repo_dir: Path,
    target: Path,
    final: Path,
    recipe: Recipe,
    backend: str,
    model: RepairModel | None,
    max_repairs: int,
    step_timeout_s: float,
) -> SetupResult:
    """Build the venv in ``target`` (renamed to ``final`` by built_once on success)."""
    venv = target / "venv"
    venv.mkdir()
    image = DOCKER_IMAGE if backend == "docker" else None
    log: list[SetupStep] = []
    with tempfile.TemporaryDirectory(prefix="envgym-swe-setup-") as scratch:
        # A copy: setup.py runs as the jail's uid in it, and the caller's checkout stays clean.
        work = Path(scratch) / "repo"
        shutil.copytree(repo_dir, work, symlinks=True)

        def run(
            name: str, argv: Sequence[str], command: str, network: bool, timeout_s: float
        ) -> CommandResult:
            result = run_in_env(
                venv,
                recipe,
                work,
                argv,
                backend=backend,
                image=image,
                network=network,
                venv_writable=True,
                timeout_s=timeout_s,
            )
            log.append(
                SetupStep(
                    name, command, result.returncode, _tail(result), round(result.duration_s, 3)
                )
            )
            return result

        made = run(
            "venv",
            [str(python_executable()), "-m", "venv", JAIL_VENV],
            f"python{HOST_PYTHON} -m venv {JAIL_VENV}",
            False,
            step_timeout_s,
        )
        if not made.ok:
            return _failed(recipe, log, f"step 'venv' failed: {_why(made)}")
        done: list[str] = []
        rule_repairs = model_repairs = 0
        while True:
            failure, reason, collected = None, "", 0
            start = _common_prefix(done, recipe.install)
            done = done[:start]
            for index in range(start, len(recipe.install)):
                command = recipe.install[index]
                result = run(
                    f"install {index + 1}/{len(recipe.install)}",
                    ["/bin/sh", "-c", command],
                    command,
                    True,
                    step_timeout_s,
                )
                if not result.ok:
                    failure = Failure(command, _tail(result), work, is_install=True)
                    reason = f"step 'install {index + 1}/{len(recipe.install)}' ({command}) failed: {_why(result)}"
                    break
                done.append(command)
            if failure is None:
                smoke = [*recipe.test_command, "--collect-only", "-q", "-p", "no:cacheprovider"]
                result = run(
                    "smoke test", smoke, " ".join(smoke), False, min(step_timeout_s, 600.0)
                )
                collected = _collected(result)
                if result.ok and collected >= 1:
                    return _succeeded(target, final, backend, image, recipe, log)
                failure = Failure(" ".join(smoke), _tail(result), work, is_install=False)
                reason = f"step 'smoke test' ({' '.join(smoke)}) collected {collected} tests: {_why(result)}"
            repaired = None
            if rule_repairs < MAX_RULE_REPAIRS:
                repaired = rule_repair(recipe, failure)
                if repaired is not None:
                    rule_repairs += 1
                    log.append(
                        SetupStep("rule repair", failure.command, None, repaired.notes[-1], 0.0)
                    )
            while repaired is None and model is not None and model_repairs < max_repairs:
                model_repairs += 1
                repaired = _ask_model(model, recipe, failure, log)
            if repaired is None and collected >= 1:
                # Some modules do not import (an optional dependency nothing could install), but
                # tests run: validation sees those modules as failing on both sides.
                return _succeeded(
                    target,
                    final,
                    backend,
                    image,
                    recipe.noted(
                        f"accepted with collection errors left after repairs: {reason[:300]}"
                    ),
                    log,
                )
            if repaired is None:
                return _failed(recipe, log, reason)
            recipe = repaired


def _ask_model(
    model: RepairModel, recipe: Recipe, failure: Failure, log: list[SetupStep]
) -> Recipe | None:
    started = time.monotonic()
    try:
        reply = model.ask(recipe, failure)
    except Exception as exc:  # noqa: BLE001 — any transport or protocol failure is one failed try
        log.append(
            SetupStep(
                "model repair",
                failure.command,
                None,
                f"model call failed: {type(exc).__name__}: {str(exc)[:300]}",
                round(time.monotonic() - started, 3),
            )
        )
        return None
    patched, why = parse_patch(reply, recipe)
    note = (
        patched.notes[-1]
        if patched is not None
        else f"reply rejected: {why}; reply was {reply[:300]!r}"
    )
    log.append(
        SetupStep("model repair", failure.command, None, note, round(time.monotonic() - started, 3))
    )
    return patched


def _succeeded(
    target: Path, final: Path, backend: str, image: str | None, recipe: Recipe, log: list[SetupStep]
) -> SetupResult:
    outcome = SetupResult(
        PythonEnv(backend, final.name, final / "venv", image, recipe),
        recipe,
        True,
        "",
        tuple(log),
        False,
    )
    _write_marker(target, outcome)
    return outcome


def _failed(recipe: Recipe, log: list[SetupStep], reason: str) -> SetupResult:
    return SetupResult(None, recipe, False, reason, tuple(log), False)


def _write_marker(target: Path, result: SetupResult) -> None:
    assert result.env is not None
    data = {"env": result.env.to_json(), "log": [step.__dict__ for step in result.log]}
    (target / MARKER).write_text(json.dumps(data, indent=1))


def _common_prefix(done: Sequence[str], install: Sequence[str]) -> int:
    count = 0
    for a, b in zip(done, install):
        if a != b:
            break
        count += 1
    return count


def _tail(result: CommandResult) -> str:
    text = result.stdout + ("\n" if result.stdout and result.stderr else "") + result.stderr
    return text[-TAIL_CHARS:]


def _why(result: CommandResult) -> str:
    if result.timed_out or result.returncode is None:
        return result.error or "did not run"
    last = [line for line in _tail(result).splitlines() if line.strip()][-3:]
    return f"exit {result.returncode}: " + " | ".join(s.strip()[:200] for s in last)


def _collected(result: CommandResult) -> int:
    """How many tests ``pytest --collect-only -q`` listed."""
    if "no tests collected" in result.stdout:
        return 0
    match = re.search(r"(\d+) tests? collected", result.stdout)
    if match:
        return int(match.group(1))
    return sum(
        1 for line in result.stdout.splitlines() if "::" in line and not line.startswith(" ")
    )
