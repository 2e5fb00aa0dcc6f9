"""Default episode budgets follow each task's gold solution (the synthesis filter's rule), and
progress shows inside episodes, also when the output is piped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bundle_factory import SOLUTION, TASK, make_notes_bundle
from test_eval_trust_identity import COMPLETION_TOKENS, StubServer
from test_rollout_doubles import ScriptedPolicy

from envgym.bundle import write_manifest
from envgym.bundle_env import BundleEnv
from envgym.evaluate import EvalConfig, EvalError, ModelRef, evaluate
from envgym.evaluate.budgets import DerivedBudget, gold_lengths
from envgym.rollout import RolloutBudget
from envgym.store import Store
from envgym.synth_agents.passk import FilterConfig

REPO = Path(__file__).resolve().parents[1]
DOUBLE = ModelRef("scripted-double", "test", "double:v1")
LONG_GOLD = 6  # five lookups and the submit

LONG = """
def solve_long(tools, task):
    for _ in range(5):
        value = tools.get_note(key="secret")
    tools.submit_result(answer_text=value)


def solve_longer(tools, task):
    for _ in range(60):
        value = tools.get_note(key="secret")
    tools.submit_result(answer_text=value)


def solve_broken(tools, task):
    raise RuntimeError("this gold solution is broken")
"""


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = make_notes_bundle(
        tmp_path / "notes",
        tasks=[TASK, {**TASK, "id": "long", "solution": "solve_long"}],
    )
    (root / "solution.py").write_text(SOLUTION + LONG)
    write_manifest(root, name="notes", category="test", provenance={"agent": "test", "seed": 0})
    return root


def wanderer(**kw: object) -> ScriptedPolicy:
    """Never submits: every episode runs until its budget stops it."""
    return ScriptedPolicy(lambda task, sample: [("list_keys", {})] * 500, **kw)  # type: ignore[arg-type]


def test_each_task_gets_the_filters_budget_for_its_gold_length(
    bundle: Path, tmp_path: Path
) -> None:
    env = BundleEnv(bundle, sandbox="bwrap")
    try:
        measured = {}
        for task in ("secret", "long"):
            env.reset(options={"task": task})
            measured[task] = len(env.gold_calls())
    finally:
        env.close()
    assert measured == {"secret": 2, "long": LONG_GOLD}
    # the filter's rule, with eval's floor (one turn; one full turn of --max-tokens)
    rule = FilterConfig(budget=RolloutBudget(max_turns=1, max_tokens=512))
    want = {t: rule.budget_for(n) for t, n in measured.items()}
    assert (want["secret"].max_turns, want["long"].max_turns) == (12, 20)
    assert (want["secret"].max_tokens, want["long"].max_tokens) == (512, 1536)

    run = evaluate(
        str(bundle),
        DOUBLE,
        EvalConfig(k=1, concurrency=2),
        store=Store(f"sqlite:///{tmp_path / 'e.db'}"),
        policy=wanderer(),
    )
    turns = {e.task_id: (e.truncated_by, e.turns) for e in run.episodes}
    assert turns == {t: ("max_turns", b.max_turns) for t, b in want.items()}

    hungry = evaluate(  # 300 tokens a turn: the episode-token budget stops it first
        str(bundle),
        DOUBLE,
        EvalConfig(k=1, concurrency=2, seed=1),
        store=Store(f"sqlite:///{tmp_path / 'e.db'}"),
        policy=wanderer(tokens_per_turn=300),
    )
    spent = {e.task_id: (e.truncated_by, e.sampled_tokens) for e in hungry.episodes}
    assert spent["secret"][0] == "max_tokens" and spent["secret"][1] <= 512
    assert spent["long"][0] == "max_tokens" and 512 < spent["long"][1] <= 1536


def test_a_pinned_dimension_wins_and_the_key_holds_the_rule(bundle: Path, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'e.db'}")
    pinned = EvalConfig(k=1, budget=DerivedBudget(max_turns=3))
    run = evaluate(str(bundle), DOUBLE, pinned, store=store, policy=wanderer())
    assert {e.turns for e in run.episodes} == {3}
    derived = EvalConfig(k=1, limit=1)
    one = evaluate(str(bundle), DOUBLE, derived, store=store, policy=wanderer())
    both = evaluate(
        str(bundle), DOUBLE, EvalConfig(k=1), store=store, policy=wanderer()
    )  # --limit is not in the key: the per-task numbers follow from the bundle
    assert one.key == both.key != run.key and both.ran == 1


def test_an_env_that_cannot_replay_its_gold_gets_the_fixed_defaults() -> None:
    class NoGold:
        closed = False

        def close(self) -> None:
            NoGold.closed = True

    assert gold_lengths(NoGold, ["a", "b"]) == {"a": None, "b": None}  # type: ignore[arg-type]
    assert NoGold.closed
    assert DerivedBudget().for_task(None) == RolloutBudget()
    assert DerivedBudget(max_tokens=99).for_task(None).max_tokens == 99


def test_a_broken_gold_names_the_task_and_the_flags(bundle: Path, tmp_path: Path) -> None:
    make_notes_bundle(bundle, tasks=[{**TASK, "id": "broken", "solution": "solve_broken"}])
    (bundle / "solution.py").write_text(SOLUTION + LONG)
    write_manifest(bundle, name="notes", category="test", provenance={"agent": "test", "seed": 0})
    store = Store(f"sqlite:///{tmp_path / 'e.db'}")
    with pytest.raises(
        EvalError,
        match=r"task 'broken'.*this gold solution is broken.*--max-turns N --episode-tokens N",
    ):
        evaluate(str(bundle), DOUBLE, EvalConfig(k=1), store=store, policy=wanderer())
    fixed = EvalConfig(k=1, budget=DerivedBudget(max_turns=2, max_tokens=64))
    assert evaluate(str(bundle), DOUBLE, fixed, store=store, policy=wanderer()).ran == 1


def test_progress_lines_show_turns_and_tokens_when_piped(bundle: Path, tmp_path: Path) -> None:
    server = StubServer()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "envgym.cli",
                "eval",
                str(bundle),
                "--model",
                server.url,
                "-k",
                "2",
                "--limit",
                "1",
                "--concurrency",
                "1",
                "--db",
                f"sqlite:///{tmp_path / 'p.db'}",
            ],
            capture_output=True,  # pipes: not a terminal
            text=True,
            timeout=180,
            cwd=REPO,
            env={**os.environ, "ENVGYM_PROGRESS_SECONDS": "0"},
        )
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    prefix = f"eval {bundle} · {server.url}: "
    assert any(line.startswith(prefix + "0/2 · ") and "running" not in line for line in lines)
    inside = [line for line in lines if line.startswith(prefix + "0/2 · 1 running · turn 1 · ")]
    assert inside[0].startswith(prefix + "0/2 · 1 running · turn 1 · 0 tokens")  # as it starts
    assert any(f"turn 1 · {COMPLETION_TOKENS} tokens" in line for line in inside)  # sampled
    finals = [line for line in lines if line.startswith(prefix + "2/2")]
    assert finals and "running" not in finals[-1]  # ended episodes leave the display


def test_a_piped_bar_that_does_not_move_still_prints_a_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    import time

    from rich.console import Console

    from envgym.progress import progress_bar

    monkeypatch.setenv("ENVGYM_PROGRESS_SECONDS", "1")
    out = io.StringIO()
    with progress_bar(Console(file=out, force_terminal=False, width=100)) as bar:
        task = bar.add_task("slow", total=None)
        bar.update(task, completed=0, total=2)
        time.sleep(3.5)  # one long model turn: nothing updates the bar
    beats = [line for line in out.getvalue().splitlines() if line.startswith("slow: 0/2 · ")]
    assert len(beats) >= 2, out.getvalue()


def test_a_budget_past_the_envs_own_turn_limit_is_not_cut_by_the_env(
    bundle: Path, tmp_path: Path
) -> None:
    make_notes_bundle(bundle, tasks=[{**TASK, "id": "longer", "solution": "solve_longer"}])
    (bundle / "solution.py").write_text(SOLUTION + LONG)
    write_manifest(bundle, name="notes", category="test", provenance={"agent": "test", "seed": 0})
    want = FilterConfig(budget=RolloutBudget(max_turns=1, max_tokens=512)).budget_for(61)
    assert want.max_turns == 130 > 128  # the env's own default turn limit
    run = evaluate(
        str(bundle),
        DOUBLE,
        EvalConfig(k=1),
        store=Store(f"sqlite:///{tmp_path / 'e.db'}"),
        policy=wanderer(),
    )
    [e] = run.episodes
    assert (e.truncated_by, e.turns) == ("max_turns", 130)
