"""Math, logic and puzzle tasks from reasoning-gym's procedural generators.

Generators were chosen where running code helps (counting primes, simulating Game of Life,
interpreting Brainf*ck, expanding polynomials, BFS over grids, solving sudoku) and where an
answer can be checked for equivalence.  Difficulty 1–5 maps onto each generator's own
curriculum (reasoning-gym's ``create_curriculum``): every attribute at level
``min(difficulty - 1, its top level, cap)``, with caps where the top level would make prompts
longer than a small model's window (a 100×100 Game of Life board).

Seeds are secret: by default every (generator, difficulty) draws its generator
seed from :mod:`secrets` at build time and the task stores it host-side
(``metadata.rg_seed`` / ``rg_index``: the bundle's tasks.jsonl, which no kernel mounts), so an
agent that knows the generator cannot regenerate the instance from the task id, index or
difficulty.  An explicit build ``seed`` derives the seeds by hashing instead: reproducible,
hence guessable, for tests and experiments only.

Degenerate draws are replaced by the next one: an answer that can be copied from its own
prompt (simplify 10/41), or one the task's answer format cannot express (simplify 7/7: "1/1" is
no reduced fraction).  Every task is checked at build time three ways: the reference program's output must be
accepted by reasoning-gym's own scorer, by the bundle's verifier against reasoning-gym's
answer, and (numbers and expressions) be sympy-equivalent to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from envgym.adversarial import exploits
from envgym.envs.code_interpreter.oracle import sympy_equivalent
from envgym.envs.code_interpreter.programs import PROGRAMS

_FILES = Path(__file__).resolve().parent / "bundle_files"
# Highest curriculum level used per generator (beyond: prompts of several thousand tokens).
LEVEL_CAPS = {
    "game_of_life": 1,
    "binary_matrix": 1,
    "rotten_oranges": 1,
    "largest_island": 1,
    "spiral_matrix": 1,
    "polynomial_multiplication": 1,
    "bf": 1,
}  # bf level 2: ~16 s per interpretation in Python
FAMILIES = ("math", "logic")
_SPARE_DRAWS = 20  # per generator and level: replace draws whose answer is in the prompt or wrong


@dataclass(frozen=True)
class GeneratedTask:
    task: dict[str, Any]  # one tasks.jsonl line
    rg_answer: str


def bundle_module(name: str) -> ModuleType:
    """Import one of our own bundle files (trusted code) on the host."""
    spec = importlib.util.spec_from_file_location(
        f"_code_interpreter_{name}", _FILES / f"{name}.py"
    )
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
            # Spare entries replace degenerate ones (see _answer_in_prompt).
            config = _config(name, difficulty, seed=rg_seed, size=per_generator + _SPARE_DRAWS)
            dataset = DATASETS[name][0](config=config)
            kept = 0
            disagreements: list[str] = []
            for index in range(per_generator + _SPARE_DRAWS):
                if kept == per_generator:
                    break
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
                    "id": f"{family}-{name.replace('_', '-')}-d{difficulty}-{kept}",  # stable when draws are skipped
                    "prompt": entry["question"].strip(),
                    "solution": "solve_with_code",
                    "verifier": "verify_answer",
                    "difficulty": difficulty,
                    "submit_tool": "submit_answer",
                    "system_prompt": None,
                    "metadata": meta,
                }
                if _unparseable(verifier.verify_answer({"answer": str(entry["answer"])}, task)):
                    continue  # reasoning-gym's own answer is no well-formed value (simplify 7/7: "1/1")
                rg_score = score(answer=printed, entry=entry)
                report = verifier.verify_answer({"answer": printed}, task)
                exact = kind in ("number", "expression") and "rel_tol" not in meta
                agrees = not exact or sympy_equivalent(printed, meta["answer"])
                if rg_score < 1.0 or not agrees or not all(c["passed"] for c in report["checks"]):
                    # The question and reasoning-gym's answer key disagree with our reference
                    # program.  Some generator entries are themselves wrong (basic_arithmetic
                    # answers "Calculate ( 8 / -( -9 - 7 + -15 ) )." with 0: ~1 draw in 300 at
                    # level 3), so such a draw is replaced by the next; a reference program that
                    # is wrong for every draw still fails the build below, naming them.
                    disagreements.append(
                        f"{task['id']} (draw {index}): printed {printed[:80]!r}, reasoning-gym answer "
                        f"{entry['answer']!r} (score {rg_score}, sympy {agrees}), verifier {report}"
                    )
                    continue
                if _answer_in_prompt(task, verifier):
                    continue
                kept += 1
                out.append(GeneratedTask(task, str(entry["answer"])))
            if kept < per_generator:
                raise RuntimeError(
                    f"{name} d{difficulty}: only {kept}/{per_generator} usable tasks in "
                    f"{per_generator + _SPARE_DRAWS} draws (the rest had their answer in the prompt, "
                    f"or the reference program disagreed: {disagreements[:3]})"
                )
    return out


def _unparseable(report: dict[str, Any]) -> bool:
    return any(c["name"] == "answer_parses" and not c["passed"] for c in report["checks"])


def _answer_in_prompt(task: dict[str, Any], verifier: ModuleType) -> bool:
    """Whether copying text from the prompt already earns the reward (a degenerate draw).

    reasoning-gym sometimes asks to simplify a fraction that is already in lowest terms
    ("Simplify 10/41": answer 10/41): a policy echoing the prompt would be rewarded without
    solving anything, so such draws are replaced by the next entry.  Two tests: an answer that
    still shows an operation (a fraction, a polynomial) written verbatim in the prompt ("Simplify
    this expression: 8428*x**3"), and the generic prompt-echo exploits the verifier accepts.
    """
    answer = re.sub(r"\s+", "", str(task["metadata"]["answer"]))
    if re.search(r"[+*/^×]|\d-", answer) and answer in re.sub(r"\s+", "", task["prompt"]):
        return True
    question = task["prompt"].split("\n", 1)[0]
    if task["metadata"]["answer_kind"] == "expression" and re.sub(r"\s+", "", question).endswith(
        ":" + answer
    ):  # "Simplify this expression: 0" -- the expression given is already its own answer
        return True
    for exploit in exploits(task["prompt"], {"answer": ""}):
        # Bare numbers are left out: one that happens to occur in the prompt is no gift, as
        # the policy cannot tell which it is.
        if exploit.name.startswith(("echo_prompt", "echo_expression")) and isinstance(
            exploit.submission.get("answer"), str
        ):
            report = verifier.verify_answer({"answer": exploit.submission["answer"]}, task)
            if all(c["passed"] for c in report["checks"]):
                return True
    return False
