"""Write a procedural bundle whose every task is proved strict before it is written.

A category supplies a :class:`Recipe`: a function that writes ``state/db.sqlite`` (SQLAlchemy,
seeded), a loader of its host-side world, the directory of its code templates (``tools.py``,
``solution.py``, ``verifier.py``), a *drawer* that proposes one task of a given difficulty and
a source of witness candidates.  Each proposal is run here, in process (the code
is ours and trusted; envgym check re-runs it in the sandbox later):

1. the gold solution runs through the tools and its submission passes the verifier;
2. the empty submission is rejected;
3. *every* single-field corruption of the gold answer (envgym.corrupt, all of them, not a
   sample) is rejected — so any sample ``envgym check`` draws is rejected too;
4. every check the gold verdict reports has a per-rule witness (envgym.envs.procedural_kit.witness),
   found among the category's candidates and verified here;
5. where the recipe sets a greedy share, the greedy baseline's outcome matches the one drawn
   for this task (so the recipe sets how many tasks need search);
6. at the recipe's ``top_levels``, no stronger baseline (greedy + local repair, exhaustive search
   within its bound; envgym.envs.procedural_kit.baselines) has an answer the verifier accepts.

A proposal that fails any of these is thrown away and another is drawn (Seed-Thinking-v1.5
§2.1: a generator paired with a verifier that "rigorously evaluates the generation
correctness"; a task whose verifier accepts a corrupted answer would reward a wrong plan).
"""

from __future__ import annotations

import importlib
import itertools
import random
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.bundle import write_manifest
from envgym.bundle_write import copy_code_files, fresh_bundle_dir, write_tasks
from envgym.cache import source_keyed_bundle
from envgym.corrupt import corruptions
from envgym.envs.procedural_kit.baselines import stronger_solves
from envgym.envs.procedural_kit.local import Episode, LocalBundle, passed
from envgym.envs.procedural_kit.witness import (
    Candidates,
    ConditionCandidates,
    condition_witnesses,
    find_witnesses,
    generic_candidates,
)

MAX_DRAWS = 60
ALL_CORRUPTIONS = 10_000  # more than any answer here has leaves × options: "all of them"

# (rng, difficulty, index) -> a tasks.jsonl line, or None when this draw is not solvable.
Drawer = Callable[[random.Random, int, int], "dict[str, Any] | None"]


class UnsolvableTask(RuntimeError):
    """No strict, solvable task of this difficulty could be drawn on this database (every
    procedural family raises this one, trip planning included)."""


@dataclass(frozen=True)
class Recipe:
    """What a category gives the kit: its database writer, world loader, task drawer and
    witness candidates; the kit does the rest (bundle files, proofs, manifest)."""

    category: str
    agent: str  # provenance, e.g. "procedural:retail_orders"
    description: str
    templates: Path
    write_db: Callable[[Path, int], Any]  # (db.sqlite path, seed)
    load_world: Callable[[Path], Any]  # db.sqlite path -> the host-side view the drawer uses
    draw_task: Callable[
        [Any, random.Random, int, int], dict[str, Any] | None
    ]  # (world, rng, difficulty, index)
    witness_candidates: Candidates
    baseline: str | None = None  # greedy solver in solution.py, written into every task line
    # difficulty -> share of that level's tasks the greedy baseline may solve (levels must
    # need search): each task draws whether it is one of them, and only draws whose baseline outcome
    # matches are kept, so the greedy solve rate per level is set by the recipe, and measured.
    greedy_share: Mapping[int, float] | None = None
    max_draws: int = MAX_DRAWS  # per task; raise it for categories whose hard draws rarely solve
    # per-condition and per-boundary probes (envgym.envs.procedural_kit.witness.ConditionCandidates)
    condition_candidates: ConditionCandidates | None = None
    # (world, metadata) -> each stronger baseline's answer (envgym.envs.procedural_kit.baselines):
    # a task of a level in ``top_levels`` is kept only when none of them passes its verifier.
    stronger: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None
    top_levels: tuple[int, ...] = ()


def category_recipe(package: str, **fields: Any) -> Recipe:
    """The :class:`Recipe` of a category laid out as the kit expects, so a category's build.py
    names only what is its own (category, description, baseline, greedy share, ...).

    ``package`` (e.g. ``"envgym.envs.retail_orders"``) holds ``data.write_db``,
    ``world.load_world``, ``tasks.draw_task``, ``witnesses.candidates`` and the code templates in
    ``bundle_files/``, and may hold ``witnesses.conditions``, ``baselines.baselines`` (the stronger
    baselines) and ``tasks.TOP_LEVELS`` (the levels they must not solve); the agent is
    ``procedural:<last part of the package>``.  ``fields`` set the rest, and may override these.
    """

    def part(name: str) -> Any:
        return importlib.import_module(f"{package}.{name}")

    data, tasks, witnesses = part("data"), part("tasks"), part("witnesses")
    try:
        stronger = part("baselines").baselines
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.baselines":
            raise  # a baselines module that is there but fails to import is a bug, not an absence
        stronger = None
    found: dict[str, Any] = {
        "agent": f"procedural:{package.rsplit('.', 1)[-1]}",
        "templates": Path(data.__file__).resolve().parent / "bundle_files",
        "write_db": data.write_db,
        "load_world": part("world").load_world,
        "draw_task": tasks.draw_task,
        "witness_candidates": witnesses.candidates,
        "condition_candidates": getattr(witnesses, "conditions", None),
        "stronger": stronger,
        "top_levels": tuple(getattr(tasks, "TOP_LEVELS", ())),
    }
    return Recipe(**{**found, **fields})


def build_procedural_bundle(
    recipe: Recipe,
    out_dir: Path,
    *,
    seed: int = 0,
    n_tasks: int = 3,
    difficulties: Sequence[int] = (1, 2, 3, 4, 5),
    name: str | None = None,
) -> Path:
    """Write a complete bundle into ``out_dir`` (absent or empty) and return it.

    Task ``i`` has difficulty ``difficulties[i % len(difficulties)]``.  Raises
    :class:`UnsolvableTask` when a difficulty cannot be drawn on this seed's database.
    """
    if n_tasks < 1:
        raise ValueError("a bundle needs at least one task (n_tasks >= 1)")
    if not difficulties or any(d not in (1, 2, 3, 4, 5) for d in difficulties):
        raise ValueError(
            f"difficulties must be a non-empty subset of 1..5, got {tuple(difficulties)!r}"
        )
    out = fresh_bundle_dir(out_dir)
    (out / "state").mkdir(parents=True, exist_ok=True)
    recipe.write_db(out / "state" / "db.sqlite", seed)
    copy_code_files(recipe.templates, out)
    world = recipe.load_world(out / "state" / "db.sqlite")
    rng = random.Random(f"{recipe.agent}:tasks:{seed}")
    local = LocalBundle(out)
    tasks: list[dict[str, Any]] = []
    try:
        with local.episode() as episode:
            for i in range(n_tasks):
                difficulty = difficulties[i % len(difficulties)]
                tasks.append(_strict_task(episode, recipe, world, rng, difficulty, i))
    finally:
        # LocalBundle registers its modules in sys.modules: a worker building thousands of
        # bundles must not keep every one of them alive.
        for module in (local.tools_module, local.solution_module, local.verifier_module):
            sys.modules.pop(module.__name__, None)
    write_tasks(out, tasks)
    write_manifest(
        out,
        name=name or f"{recipe.agent.split(':')[-1].replace('_', '-')}-seed{seed}",
        category=recipe.category,
        description=recipe.description,
        provenance={"agent": recipe.agent, "model": None, "seed": seed},
    )
    return out


def _strict_task(
    episode: Episode, recipe: Recipe, world: Any, rng: random.Random, difficulty: int, index: int
) -> dict[str, Any]:
    problems: list[str] = []
    share = recipe.greedy_share.get(difficulty) if recipe.greedy_share is not None else None
    want_greedy = None if share is None else rng.random() < share
    # A draw the greedy baseline should solve but does not is still a strict task: if no draw
    # greedy solves turns up, keep the first such one (the share of easy tasks is a target, and
    # the measured greedy rate is what `envgym check` reports), rather than lose the bundle.
    # The reverse never happens: a task meant to defeat greedy is never replaced by one it solves.
    harder: dict[str, Any] | None = None
    for _ in range(recipe.max_draws):
        task = recipe.draw_task(world, rng, difficulty, index)
        if task is None:
            continue
        beaten = None
        if difficulty in recipe.top_levels:  # before the gold: the cheap reason to re-draw
            beaten = _stronger_solves(episode, recipe, world, task)
        if beaten is not None:
            problems.append(f"{beaten} solves it")
            continue
        gold, problem = _gold(episode, task)
        if problem is None:
            problem = _declared_problem(episode, task, gold)
        if problem is None:
            problem = _corruption_problem(episode, task, gold)
        if problem is None:
            witnesses, missing = witnesses_for(
                episode, task, gold, recipe.witness_candidates(world, task, gold)
            )
            problem = f"no witness for {missing}" if missing else None
            if problem is None and recipe.condition_candidates is not None:
                rules = [w["rule"] for w in witnesses]
                witnesses += condition_witnesses(
                    lambda sub: episode.verify(sub, task),  # noqa: B023 - called within this iteration
                    rules,
                    recipe.condition_candidates(world, task, gold),
                )
        if problem is None and recipe.baseline is not None:
            task = {**task, "baseline": recipe.baseline}
            if want_greedy is not None and baseline_solves(episode, task) != want_greedy:
                problem = "greedy baseline " + ("fails" if want_greedy else "solves")
                if want_greedy and harder is None:
                    harder = {**task, "witnesses": witnesses}
        if problem is None:
            return {**task, "witnesses": witnesses}
        problems.append(problem)
    if harder is not None:
        return harder
    seen = "; ".join(sorted(set(problems))[:3]) or "no solvable draw"
    raise UnsolvableTask(
        f"no strict difficulty-{difficulty} task in {recipe.max_draws} draws ({seen})"
    )


def witnesses_for(
    episode: Episode,
    task: dict[str, Any],
    gold: dict[str, Any],
    candidates: Iterable[tuple[dict[str, Any], str]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Per-rule witnesses for every check the gold verdict reports, each checked by the verifier."""
    rules = [c["name"] for c in episode.verify(gold, task)["checks"]]
    return find_witnesses(
        lambda sub: episode.verify(sub, task),
        rules,
        itertools.chain(generic_candidates(), candidates),
    )


def _stronger_solves(
    episode: Episode, recipe: Recipe, world: Any, task: dict[str, Any]
) -> str | None:
    """The first stronger baseline whose answer the task's verifier accepts, or None."""
    if recipe.stronger is None:
        return None
    answers = recipe.stronger(world, task["metadata"])
    return stronger_solves(lambda sub: episode.verify(sub, task), answers)


def baseline_solves(episode: Episode, task: dict[str, Any]) -> bool:
    """Whether the task's greedy baseline submits an answer the verifier accepts."""
    try:
        attempt = episode.solve(
            {**task, "solution": task["baseline"]},
            submit_tool=task.get("submit_tool") or "submit_result",
        )
    except Exception:  # noqa: BLE001 - a greedy solver that gives up has not solved the task
        return False
    return attempt.submission is not None and passed(episode.verify(attempt.submission, task))


def _gold(episode: Episode, task: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    submit = task.get("submit_tool") or "submit_result"
    try:
        solved = episode.solve(task, submit_tool=submit)
    except Exception as exc:  # noqa: BLE001 - an unsolvable draw: the solution says why
        return {}, f"gold raised {type(exc).__name__}"
    if solved.submission is None:
        return {}, "gold never submitted"
    if not passed(episode.verify(solved.submission, task)):
        return {}, "gold rejected by the verifier"
    return solved.submission, None


def _declared_problem(episode: Episode, task: dict[str, Any], gold: dict[str, Any]) -> str | None:
    """The recipe declares the task's rules from its constraints; the verifier must report them."""
    declared = (task.get("metadata") or {}).get("declared_rules")
    reported = [c["name"] for c in episode.verify(gold, task)["checks"]]
    if declared is not None and sorted(declared) != sorted(reported):
        return f"the verifier reports {reported}, the recipe declares {declared}"
    return None


def _corruption_problem(episode: Episode, task: dict[str, Any], gold: dict[str, Any]) -> str | None:
    if passed(episode.verify({}, task)) or passed(episode.verify({k: "" for k in gold}, task)):
        return "verifier accepts an empty submission"
    for bad in corruptions(gold, ALL_CORRUPTIONS, random.Random(0)):
        if passed(episode.verify(bad, task)):
            return "verifier accepts a corrupted answer"
    return None


def strictness_problem(episode: Episode, task: dict[str, Any]) -> str | None:
    """None when the task's gold passes and every corruption and the no-op are rejected."""
    gold, problem = _gold(episode, task)
    return problem if problem is not None else _corruption_problem(episode, task, gold)


def default_bundle_dir(recipe: Recipe, *, seed: int = 0, n_tasks: int = 10) -> Path:
    """The category's registered default bundle, built once into the envgym cache.

    Keyed by a digest of the category's and the kit's sources, so an edited generator never
    serves a stale bundle; concurrent callers wait for one build (envgym/cache.py).
    """
    slug = recipe.agent.split(":")[-1].replace("_", "-")
    return cached_bundle(
        slug,
        f"{recipe.agent}\0{seed}\0{n_tasks}",
        recipe.templates.parent,
        lambda out: build_procedural_bundle(recipe, out, seed=seed, n_tasks=n_tasks),
    )


def cached_bundle(
    slug: str,
    identity: str,
    package: Path,
    build: Callable[[Path], Path],
    *,
    skip: frozenset[str] = frozenset(),
) -> Path:
    """``build``'s bundle, built once into ``<cache>/bundles/<slug>-v0-<key>`` and reused.

    ``envgym.cache.source_keyed_bundle`` over the family's ``package`` and this kit (a family's
    bundle is shaped by both): the key hashes ``identity`` (what the family's build depends on
    besides code: generator version, seed, task count) and their ``*.py`` sources (file names
    in ``skip`` left out).
    """
    return source_keyed_bundle(
        f"{slug}-v0", identity, (package, Path(__file__).resolve().parent), build, skip=skip
    )


def write_rows(path: Path, base: type, rows: list[Any]) -> Path:
    """Create ``base``'s tables in a new SQLite file and insert ``rows`` (ORM objects) in order.

    Rows go in per table with one executemany each (SQLAlchemy Core): several times faster
    than an ORM flush, which matters when a run builds a hundred databases a minute.  The file
    is VACUUM-ed, so the same rows give the same bytes.
    """
    from sqlalchemy import create_engine, insert

    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} already exists; the generator never overwrites a database")
    by_table: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        table = type(row).__table__
        by_table.setdefault(table, []).append({c.key: getattr(row, c.key) for c in table.columns})
    engine = create_engine(f"sqlite:///{path}")
    try:
        base.metadata.create_all(engine)
        with engine.begin() as conn:
            for table in base.metadata.sorted_tables:
                if by_table.get(table):
                    conn.execute(insert(table), by_table[table])
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM")
    finally:
        engine.dispose()
    return path
