"""Math, logic and puzzle tasks from reasoning-gym's procedural generators.

Generators were chosen where running code helps (counting primes, simulating Game of Life,
interpreting Brainf*ck, expanding polynomials, BFS over grids, solving sudoku) and where an
answer can be checked for equivalence.  Difficulty 1–5 maps onto each generator's own
curriculum (reasoning-gym's ``create_curriculum``): every attribute at level
``min(difficulty - 1, its top level, cap)``, with caps where the top level would make prompts
longer than a small model's window (a 100×100 Game of Life board).

Seeds (issue 9, items 2 and 4): by default every (generator, difficulty) draws its generator
seed from :mod:`secrets` at build time and the task stores it host-side
(``metadata.rg_seed`` / ``rg_index``: the bundle's tasks.jsonl, which no kernel mounts), so an
agent that knows the generator cannot regenerate the instance from the task id, index or
difficulty.  An explicit build ``seed`` derives the seeds by hashing instead: reproducible,
hence guessable, for tests and experiments only.

Every task is checked at build time three ways: the reference program's output must be
accepted by reasoning-gym's own scorer, by the bundle's verifier against reasoning-gym's
answer, and (numbers and expressions) be sympy-equivalent to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from envs.code_interpreter.oracle import sympy_equivalent
from envs.code_interpreter.programs import PROGRAMS

_FILES = Path(__file__).resolve().parent / "bundle_files"
# Highest curriculum level used per generator (beyond: prompts of several thousand tokens).
LEVEL_CAPS = {"game_of_life": 1, "binary_matrix": 1, "rotten_oranges": 1, "largest_island": 1, "spiral_matrix": 1,
              "polynomial_multiplication": 1, "bf": 1}  # bf level 2: ~16 s per interpretation in Python
FAMILIES = ("math", "logic")


@dataclass(frozen=True)
class GeneratedTask:
    task: dict[str, Any]  # one tasks.jsonl line
    rg_answer: str


def bundle_module(name: str) -> ModuleType:
    """Import one of our own bundle files (trusted code) on the host."""
    spec = importlib.util.spec_from_file_location(f"_code_interpreter_{name}", _FILES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generators(family: str) -> list[str]:
    if family not in FAMILIES:
        raise ValueError(f"unknown reasoning family {family!r}; known: {', '.join(FAMILIES)}")
    return [name for name, spec in PROGRAMS.items() if spec[0] == family]


def _config(name: str, difficulty: int, seed: int, size: int) -> Any:
    from reasoning_gym.factory import create_curriculum

    curriculum = create_curriculum(name)
    for attr, definition in curriculum.attributes.items():
        top = len(definition.levels) - 1
        curriculum.set_attr_level(attr, min(difficulty - 1, top, LEVEL_CAPS.get(name, top)))
    return curriculum.generate_configuration({"seed": seed, "size": size})


def _params(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    meta = dict(entry["metadata"])
    if name == "game_of_life":  # the board is only in the question text
        meta["board"] = json.loads(entry["question"].rsplit("\n\n", 1)[1].strip().rstrip("."))
    return meta


def task_seed(seed: int | None, name: str, difficulty: int) -> int:
    """The generator seed of (``name``, ``difficulty``): secret by default (``seed`` None), else
    a hash of the explicit build seed (never the old, guessable ``seed * 1000 + difficulty``)."""
    if seed is None:
        return secrets.randbits(63)
    digest = hashlib.sha256(f"code-interpreter\0{seed}\0{name}\0{difficulty}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def regenerate(task: dict[str, Any]) -> dict[str, Any]:
    """Host side: reasoning-gym's entry of a built task, from the seed stored with it."""
    from reasoning_gym.factory import DATASETS

    meta = task["metadata"]
    name, index = meta["generator"], int(meta["rg_index"])
    config = _config(name, int(task["difficulty"]), seed=int(meta["rg_seed"]), size=index + 1)
    with contextlib.redirect_stdout(io.StringIO()):
        return dict(DATASETS[name][0](config=config)[index])


def generate(
    family: str,
    *,
    seed: int | None = None,
    per_generator: int = 1,
    difficulties: Sequence[int] = (1, 2, 3),
) -> list[GeneratedTask]:
    """Tasks of one family: ``per_generator`` instances per generator and difficulty."""
    from reasoning_gym.factory import DATASETS, get_score_answer_fn

    tools, verifier = bundle_module("tools"), bundle_module("verifier")
    out: list[GeneratedTask] = []
    for name in generators(family):
        _, kind, extra, program = PROGRAMS[name]
        score = get_score_answer_fn(name)
        for difficulty in difficulties:
            if not 1 <= difficulty <= 5:
                raise ValueError(f"difficulty must be 1..5, got {difficulty}")
            rg_seed = task_seed(seed, name, difficulty)
            config = _config(name, difficulty, seed=rg_seed, size=per_generator)
            dataset = DATASETS[name][0](config=config)
            for index in range(per_generator):
                with contextlib.redirect_stdout(io.StringIO()):  # some generators print progress
                    entry = dataset[index]
                params = _params(name, entry)
                code = program(params)
                printed = tools.python(code).strip()
                meta: dict[str, Any] = {
                    "family": family,
                    "generator": name,
                    "answer_kind": kind,
                    "answer": str(entry["answer"]),
                    "reference_code": code,
                    "rg_seed": rg_seed,
                    "rg_index": index,
                    **extra,
                }
                if kind == "sudoku":
                    meta["puzzle"] = params["puzzle"]
                task = {
                    "id": f"{family}-{name.replace('_', '-')}-d{difficulty}-{index}",
                    "prompt": entry["question"].strip(),
                    "solution": "solve_with_code",
                    "verifier": "verify_answer",
                    "difficulty": difficulty,
                    "submit_tool": "submit_answer",
                    "system_prompt": None,
                    "metadata": meta,
                }
                rg_score = score(answer=printed, entry=entry)
                report = verifier.verify_answer({"answer": printed}, task)
                exact = kind in ("number", "expression") and "rel_tol" not in meta
                agrees = not exact or sympy_equivalent(printed, meta["answer"])
                if rg_score < 1.0 or not agrees or not all(c["passed"] for c in report["checks"]):
                    raise RuntimeError(
                        f"reference program of {task['id']} disagrees: printed {printed[:80]!r}, "
                        f"reasoning-gym answer {entry['answer']!r} (score {rg_score}, sympy {agrees}), verifier {report}"
                    )
                out.append(GeneratedTask(task, str(entry["answer"])))
    return out
