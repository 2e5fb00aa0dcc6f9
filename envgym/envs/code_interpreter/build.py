"""Build code-interpreter bundles (docs/BUNDLE.md) and the cached default bundles.

from envgym.envs.code_interpreter.build import build_bundle, default_bundle_dir
build_bundle(Path("out/ci"), families=("math", "data"), seed=3)
default_bundle_dir("all")   # ~/.cache/envgym/bundles/code-interpreter-all-<hash>, built once
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envgym.bundle import write_manifest
from envgym.bundle_write import copy_code_files, fresh_bundle_dir, write_tasks
from envgym.cache import source_keyed_bundle
from envgym.envs.code_interpreter import data_tasks, reasoning

GENERATOR_VERSION = "code-interpreter-2"  # 2: secret generator seeds kept with each task
CATEGORY = "code interpreter"
FAMILIES = ("math", "logic", "data")
_PACKAGE = Path(__file__).resolve().parent
_TEMPLATES = _PACKAGE / "bundle_files"
# Modules of this package that do not shape the bundle: editing them keeps the cached one.
_NOT_BUNDLE_SHAPING = frozenset({"registration.py", "env.py", "prompts.py"})
DESCRIPTION = (
    "Problems solved with a stateful Python notebook (DeepSeek-V3.2 §3.2.3, code interpreter): "
    "math and logic puzzles from reasoning-gym generators and data-science questions over CSV and "
    "SQLite files; answers checked for numeric/symbolic equivalence."
)


def build_bundle(
    out_dir: Path,
    *,
    families: Sequence[str] = FAMILIES,
    seed: int | None = None,
    per_generator: int = 1,
    difficulties: Sequence[int] = (1, 2, 3, 4, 5),
) -> Path:
    """Write a complete bundle into ``out_dir`` (absent or empty) and return it.

    ``per_generator`` instances per reasoning-gym generator and difficulty, and per data
    template (data templates have a fixed difficulty each).  Every reference answer is checked
    against the bundle's own verifier (and reasoning-gym's scorer) while building.

    ``seed`` None (the default) draws every generator seed from :mod:`secrets` and keeps it
    with its task (reasoning.py); an explicit seed makes the build reproducible and therefore
    guessable by an agent that knows this code: use it for tests, not for training data.
    """
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown or not families:
        raise ValueError(
            f"families must be a non-empty subset of {FAMILIES}, got {tuple(families)}"
        )
    out = fresh_bundle_dir(out_dir)
    (out / "state").mkdir(parents=True, exist_ok=True)
    tasks: list[dict[str, Any]] = []
    for family in families:
        if family == "data":
            tasks += data_tasks.generate(
                out / "state", seed=seed, per_template=per_generator, difficulties=difficulties
            )
        else:
            made = reasoning.generate(
                family, seed=seed, per_generator=per_generator, difficulties=difficulties
            )
            tasks += [g.task for g in made]
    if not tasks:
        raise ValueError("no tasks: the chosen difficulties select nothing")
    write_tasks(out, tasks)
    copy_code_files(_TEMPLATES, out)
    write_manifest(
        out,
        name=f"code-interpreter-{'-'.join(families)}-{'secret-seeds' if seed is None else f'seed{seed}'}",
        category=CATEGORY,
        description=DESCRIPTION,
        provenance={"agent": "procedural:code_interpreter", "model": None, "seed": seed},
    )
    return out


def default_bundle_dir(family: str = "all", seed: int | None = None) -> Path:
    """The default bundle of ``family`` ("all" or one of FAMILIES), built once into the cache.

    With ``seed`` None the build draws secret seeds (once: the cached bundle keeps them).
    Keyed by the generator version, the arguments and the source of this package (but the
    modules that do not shape the bundle), so an edited generator never serves a stale bundle;
    concurrent callers wait for one build and never see half a bundle (envgym/cache.py).
    """
    families = FAMILIES if family == "all" else (family,)
    return source_keyed_bundle(
        f"code-interpreter-{family}",
        f"{GENERATOR_VERSION}\0{family}\0{seed}",
        (_PACKAGE,),
        lambda out: build_bundle(out, families=families, seed=seed),
        skip=_NOT_BUNDLE_SHAPING,
    )
