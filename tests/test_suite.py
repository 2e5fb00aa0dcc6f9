"""Suites (``envgym synth --categories``): manifest, category split, resume after a kill,
suite-wide dedup, bad inputs named, and the trainer's config expanding a suite.

Most tests build small notes bundles (one task each, docs/CHECK.md's witness contract) through
the real pipeline and validation with the in-process sandbox, so they stay fast; one builds real
spec categories end to end through the CLI.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from synth_notes import make_witnessed_notes
from typer.testing import CliRunner

from envgym.cli import app
from envgym.commands.eval import suite_targets
from envgym.evaluate import EvalError
from envgym.suite_manifest import SuiteError, load_suite
from envgym.synth_agents import pipeline
from envgym.synth_agents.pipeline import Job, MakeOutcome
from envgym.synth_agents.suite import SuiteConfig, build_suite
from envgym.synth_agents.suite_categories import read_categories, split_categories
from envgym.trainer.config import ConfigError, config_from_dict

pytestmark = pytest.mark.timeout(600)
runner = CliRunner()
WORDS = "amber basil cedar delta ember fjord glade harbor iris juniper kelp lotus".split()
EXTRA_TOOL = '''

def count_notes() -> int:
    """How many notes there are."""
    return int(sqlite().execute("SELECT COUNT(*) FROM notes").fetchone()[0])
'''


def prompt(category: str, seed: int) -> str:
    rng = random.Random(f"{category}/{seed}")
    words = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(10))
    return f"Case {words}: find the note called 'secret' and submit its value with submit_result."


class NotesAgent:
    """A distinct one-task notes bundle per (category, seed); ``copy_of`` plants duplicates:
    ``("env", c)`` remakes category c's environment exactly, ``("task", c)`` puts c's task
    beside an own one in an environment with one more tool."""

    def __init__(self, category: str, copy_of: tuple[str, str] | None = None) -> None:
        self.category, self.copy_of = category, copy_of
        self.slug = category.replace(" ", "-")
        self.name = f"test:{self.slug}"

    def make(self, job: Job, staging: Path) -> MakeOutcome:
        own = self._task(self.category, job.seed, "secret")
        if self.copy_of is None:
            make_witnessed_notes(staging, tasks=[own])
        elif self.copy_of[0] == "env":
            make_witnessed_notes(staging, tasks=[self._task(self.copy_of[1], job.seed, "secret")])
        else:
            from bundle_factory import TOOLS

            other = self._task(self.copy_of[1], job.seed, "secret")
            own = {**own, "id": "own"}
            make_witnessed_notes(staging, tools=TOOLS + EXTRA_TOOL, tasks=[other, own])
        return MakeOutcome(True)

    @staticmethod
    def _task(category: str, seed: int, task_id: str) -> dict:
        return {
            "id": task_id,
            "prompt": prompt(category, seed),
            "solution": "solve_secret",
            "verifier": "verify_secret",
            "difficulty": 1 + seed % 3,
            "submit_tool": "submit_result",
            "metadata": {"key": "secret", "case": f"{category}/{seed}"},
        }


def factory(copies: dict[str, tuple[str, str]] | None = None):  # noqa: ANN201
    return lambda name, config: NotesAgent(name, (copies or {}).get(name))


def config(names: tuple[str, ...], k: int = 2, **kw: object) -> SuiteConfig:
    return SuiteConfig(categories=names, per_category=k, sandbox="inprocess", **kw)  # type: ignore[arg-type]


CATS = ("alpha", "beta", "gamma")


def test_manifest_lists_every_bundle_with_its_split(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    manifest = build_suite(config(CATS, held_out_share=0.34), out, None, agent_factory=factory())
    on_disk = json.loads((out / "suite.json").read_text())
    assert on_disk == json.loads(json.dumps(manifest))
    assert (on_disk["format"], on_disk["version"]) == ("envgym-suite", 1)
    assert len(on_disk["bundles"]) == 6 and on_disk["dropped"] == []
    assert len(on_disk["splits"]["held_out"]) == 1 and len(on_disk["splits"]["train"]) == 2
    split_of = {c: s for s, names in on_disk["splits"].items() for c in names}
    for row in on_disk["bundles"]:
        root = out / row["path"]
        assert (root / "tasks.jsonl").is_file() and row["tasks"] == 1
        assert row["split"] == split_of[row["category"]]
        assert (
            json.loads((root / "manifest.json").read_text())["content_hash"] == row["content_hash"]
        )
    report = on_disk["report"]
    assert (report["environments"], report["tasks"], report["categories"]) == (6, 6, 3)
    tools = report["tools_per_environment"]
    assert tools["min"] == tools["median"] == tools["max"] == report["distinct_tool_names"] > 1
    assert sum(report["tasks_per_level"].values()) == 6
    assert report["check_pass_rate"] == 1.0
    suite = load_suite(out)
    assert len(suite.select("train")) == 4 and len(suite.select("held_out")) == 2


@pytest.mark.parametrize("seed", range(6))
def test_split_is_by_category_seeded_and_order_free(seed: int) -> None:
    names = tuple(f"c{i}" for i in range(20))
    split = split_categories(names, 0.25, seed)
    assert set(split) == set(names) and set(split.values()) == {"train", "held_out"}
    assert sum(v == "held_out" for v in split.values()) == 5
    assert split_categories(tuple(reversed(names)), 0.25, seed) == split
    assert split_categories(names, 0.0, seed) == dict.fromkeys(names, "train")


@pytest.mark.parametrize("seed", range(6))
def test_a_validation_share_takes_training_categories_and_leaves_held_out_as_it_was(
    seed: int,
) -> None:
    names = tuple(f"c{i}" for i in range(20))
    before = split_categories(names, 0.25, seed)
    split = split_categories(names, 0.25, seed, 0.1)
    assert [split[n] for n in names].count("validation") == 2
    assert {n for n in names if split[n] == "held_out"} == {
        n for n in names if before[n] == "held_out"
    }
    assert all(before[n] == "train" for n in names if split[n] == "validation")
    assert split_categories(tuple(reversed(names)), 0.25, seed, 0.1) == split
    # a share asked for gets one category; training always keeps one
    few = split_categories(("a", "b", "c"), 0.1, seed, 0.1)
    assert sorted(few.values()) == ["held_out", "train", "validation"]
    assert sorted(split_categories(("a", "b"), 0.1, seed, 0.1).values()) == ["held_out", "train"]


def test_a_suite_with_a_validation_split_reads_back_and_old_suites_still_load(
    tmp_path: Path,
) -> None:
    out = tmp_path / "suite"
    build_suite(
        config(CATS, held_out_share=0.34, validation_share=0.34), out, None, agent_factory=factory()
    )
    suite = load_suite(out)
    assert {k: len(v) for k, v in suite.splits.items()} == {
        "train": 1,
        "validation": 1,
        "held_out": 1,
    }
    assert len(suite.select("validation")) == 2  # two bundles of its one category
    with pytest.raises(SuiteError, match="started with validation_share=0.34, not 0.0"):
        build_suite(config(CATS, held_out_share=0.34), out, None, agent_factory=factory())
    data = json.loads((out / "suite.json").read_text())
    category = data["splits"]["validation"][0]
    data["splits"]["train"].append(category)
    (out / "suite.json").write_text(json.dumps(data))
    with pytest.raises(SuiteError, match=f"{category!r} is in both 'train' and 'validation'"):
        load_suite(out)
    # A suite written before the validation split: no such key, and its journal has no share.
    old = tmp_path / "old"
    build_suite(config(CATS, held_out_share=0.34), old, None, agent_factory=factory())
    data = json.loads((old / "suite.json").read_text())
    assert data["splits"].pop("validation") == []
    (old / "suite.json").write_text(json.dumps(data))
    assert load_suite(old).splits["validation"] == ()
    journal = (old / "suite.jsonl").read_text().replace('"validation_share": 0.0, ', "")
    assert "validation_share" not in journal
    (old / "suite.jsonl").write_text(journal)
    build_suite(config(CATS, held_out_share=0.34), old, None, agent_factory=factory())  # resumes
    data["splits"]["tests"] = []
    (old / "suite.json").write_text(json.dumps(data))
    with pytest.raises(SuiteError, match="'splits' must be an object with the keys"):
        load_suite(old)


def test_seeds_change_the_split() -> None:
    names = tuple(f"c{i}" for i in range(20))
    assert len({tuple(sorted(split_categories(names, 0.25, s).items())) for s in range(5)}) > 1


def test_kill_after_the_second_bundle_then_rerun_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "suite"
    made: list[str] = []
    real = pipeline.make_and_validate

    def crashing(agent, job, staging, settings):  # noqa: ANN001, ANN202
        if len(made) == 3:  # two bundles committed, the third built: the process dies
            raise KeyboardInterrupt
        made.append(job.key)
        return real(agent, job, staging, settings)

    monkeypatch.setattr(pipeline, "make_and_validate", crashing)
    with pytest.raises(KeyboardInterrupt):
        build_suite(config(CATS), out, None, agent_factory=factory())
    journal = [json.loads(x) for x in (out / "suite.jsonl").read_text().splitlines()]
    assert [r["key"] for r in journal if r["type"] == "bundle"] == [
        "alpha/alpha-0",
        "alpha/alpha-1",
    ]
    monkeypatch.setattr(pipeline, "make_and_validate", real)
    manifest = build_suite(config(CATS), out, None, agent_factory=factory())
    keys = [json.loads(x)["key"] for x in (out / "suite.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 7  # the config record + six bundles, none twice
    assert [b["path"] for b in manifest["bundles"]] == [
        f"bundles/{c}/{c}-{i}" for c in CATS for i in (0, 1)
    ]
    again = build_suite(config(CATS), out, None, agent_factory=factory())
    assert again["bundles"] == manifest["bundles"]


def test_planted_duplicates_are_dropped_across_the_suite(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    copies = {"delta": ("env", "alpha"), "epsilon": ("task", "beta")}
    manifest = build_suite(
        config((*CATS, "delta", "epsilon"), k=1), out, None, agent_factory=factory(copies)
    )
    dropped = {d["category"]: d for d in manifest["dropped"]}
    assert dropped["delta"]["reason"] == "duplicate_environment"
    assert dropped["delta"]["duplicate_of"] == "alpha/alpha-0"
    row = next(b for b in manifest["bundles"] if b["category"] == "epsilon")
    assert row["tasks"] == 1  # the copied task is gone, its own task stays
    lines = (out / row["path"] / "tasks.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["own"]
    assert manifest["report"]["duplicates"]["environments"] == 1
    assert manifest["report"]["duplicates"]["tasks_across_suite"] == 1
    tools = manifest["report"]["tools_per_environment"]
    assert tools["max"] == tools["min"] + 1 == manifest["report"]["distinct_tool_names"]


def test_damaged_manifest_and_journal_are_named(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    build_suite(config(("alpha",), k=1), out, None, agent_factory=factory())
    text = (out / "suite.json").read_text()
    (out / "suite.json").write_text(text[: len(text) // 2])
    with pytest.raises(SuiteError, match="suite.json is truncated or not JSON"):
        load_suite(out)
    with pytest.raises(SuiteError, match="truncated or not JSON"):
        build_suite(config(("alpha",), k=1), out, None, agent_factory=factory())
    (out / "suite.json").write_text(text)
    journal = (out / "suite.jsonl").read_text().splitlines()
    (out / "suite.jsonl").write_text("\n".join(["{not json", *journal]) + "\n")
    with pytest.raises(SuiteError, match="suite journal is damaged.*line 1"):
        build_suite(config(("alpha",), k=1), out, None, agent_factory=factory())
    data = json.loads(text)
    data["bundles"][0]["path"] = "../../etc"
    (out / "suite.json").write_text(json.dumps(data))
    with pytest.raises(SuiteError, match="inside the suite"):
        load_suite(out)


def test_a_rerun_with_other_arguments_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    build_suite(config(("alpha",), k=1), out, None, agent_factory=factory())
    with pytest.raises(SuiteError, match="started with seed=0, not 5"):
        build_suite(config(("alpha",), k=1, seed=5), out, None, agent_factory=factory())


def test_bad_inputs_are_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n")
    with pytest.raises(SuiteError, match="names no category"):
        read_categories(str(empty))
    typo = tmp_path / "typo.txt"
    typo.write_text("library loans\nairline seets\n")
    with pytest.raises(SuiteError, match=r"typo.txt line 2: .*'airline seats'"):
        read_categories(str(typo))
    twice = tmp_path / "twice.txt"
    twice.write_text("library loans\nlibrary\n")
    with pytest.raises(SuiteError, match="line 2.*already on line 1"):
        read_categories(str(twice))
    with pytest.raises(SuiteError, match="cannot read the categories file"):
        read_categories(str(tmp_path / "missing.txt"))
    assert read_categories("all")[:2] == ("trip planning", "retail orders")
    with pytest.raises(SuiteError, match="--per-category must be at least 1, not 0"):
        build_suite(config(("alpha",), k=0), tmp_path / "o", None, agent_factory=factory())
    cats = tmp_path / "cats.txt"
    cats.write_text("library loans\n")
    for args, message in [
        (["--per-category", "0"], "--per-category must be at least 1, not 0"),
        (["--per-category", "1", "--held-out-share", "1.5"], "--held-out-share must be in"),
        (
            ["--per-category", "1", "--held-out-share", "0.5", "--validation-share", "0.5"],
            "leave no share of the categories to train on",
        ),
        (["--per-category", "1", "--agent", "llm"], "procedural agent"),
    ]:
        result = runner.invoke(
            app, ["synth", "--categories", str(cats), "--out", str(tmp_path / "x"), *args]
        )
        assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    result = runner.invoke(
        app, ["synth", "retail", "--categories", str(cats), "--per-category", "1"]
    )
    assert result.exit_code == 2 and "not both" in result.output


def test_train_config_expands_a_suite_and_names_bad_ones(tmp_path: Path) -> None:
    out = tmp_path / "suite"
    build_suite(config(CATS, held_out_share=0.34), out, None, agent_factory=factory())
    suite = load_suite(out)

    def envs(**entry: object) -> list[str]:
        return [e.id for e in config_from_dict({"envs": [{"id": str(out), **entry}]}).envs]

    train = envs(split="train", sandbox="inprocess")
    assert train == [str(out / b.path) for b in suite.select("train")] and len(train) == 4
    assert envs() == train  # a suite without a split trains on its train split
    assert envs(split="held_out") == [str(out / b.path) for b in suite.select("held_out")]
    assert len(envs(split="all")) == 6
    mixed = config_from_dict({"envs": [{"id": str(out), "split": "held_out"}, {"id": "notes-v0"}]})
    assert [e.id for e in mixed.envs][-1] == "notes-v0" and len(mixed.envs) == 3
    with pytest.raises(ConfigError, match=r"envs\[0\].*unknown split 'test'"):
        envs(split="test")
    with pytest.raises(ConfigError, match=r"envs\[0\].*nowhere.*is not a suite"):
        config_from_dict({"envs": [{"id": str(tmp_path / "nowhere"), "split": "train"}]})
    with pytest.raises(ConfigError, match="tasks cannot restrict a suite"):
        envs(tasks=["secret"])
    # envgym eval resolves a suite the same way (held-out by default)
    assert suite_targets(str(out), None) == [str(out / b.path) for b in suite.select("held_out")]
    assert suite_targets("notes-v0", None) is None
    with pytest.raises(EvalError, match="unknown split 'dev'"):
        suite_targets(str(out), "dev")
    with pytest.raises(EvalError, match="is not a suite"):
        suite_targets(str(tmp_path / "nowhere"), "train")


@pytest.mark.heavy
def test_real_categories_through_the_cli(tmp_path: Path, require_backend) -> None:
    """Two spec categories × one bundle of one task: the command a 1,000-bundle run uses."""
    require_backend("bwrap")
    cats = tmp_path / "cats.txt"
    cats.write_text("# a hand-written spec and a corpus domain\nlibrary loans\nairline seats\n")
    args = ["synth", "--categories", str(cats), "--per-category", "1", "--tasks-per-bundle", "1"]
    args += ["--out", str(tmp_path / "s"), "--db", f"sqlite:///{tmp_path}/db.sqlite"]
    result = runner.invoke(app, [*args, "--workers", "1", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (report["environments"], report["categories"], report["check_pass_rate"]) == (2, 2, 1.0)
    assert report["distinct_tool_signatures"] >= report["distinct_tool_names"] > 2
    assert report["splits"] == {"train": 1, "validation": 0, "held_out": 1}
    text = runner.invoke(app, [*args, "--workers", "1"])
    assert text.exit_code == 0 and "distinct tool signatures" in text.stdout


def test_a_split_evaluates_as_one_task_set_that_envgym_compare_reads(tmp_path: Path) -> None:
    """``envgym eval SUITE --json`` pools the split: one interval over all its tasks and
    ``BUNDLE::TASK`` rows, so ``envgym compare`` gives a paired difference across the suite."""
    out = tmp_path / "suite"
    build_suite(config(CATS, held_out_share=0.34), out, None, agent_factory=factory())
    names = [Path(b.path).name for b in load_suite(out).select("train")]
    files = {}
    for model in ("gold", "random"):
        args = ["eval", str(out), "--split", "train", "--model", model, "--sandbox", "inprocess"]
        args += ["--db", f"sqlite:///{tmp_path}/db.sqlite", "--max-turns", "2", "--json"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        files[model] = tmp_path / f"{model}.json"
        files[model].write_text(result.stdout.strip().splitlines()[-1])
    gold = json.loads(files["gold"].read_text())
    assert gold["tasks"] == 4 and len(gold["per_bundle"]) == 4
    assert sorted(r["task_id"] for r in gold["per_task"]) == sorted(f"{n}::secret" for n in names)
    p = gold["pass@1"]
    assert p["value"] == 1.0 and 0.3 < p["low"] < 1.0 and p["high"] == 1.0  # Wilson, 4 tasks
    compared = runner.invoke(app, ["compare", str(files["random"]), str(files["gold"]), "--json"])
    assert compared.exit_code == 0, compared.output
    diff = json.loads(compared.stdout)
    random_mean = json.loads(files["random"].read_text())["mean_reward"]["value"]
    assert diff["tasks"] == 4 and diff["b_mean"] == 1.0
    assert diff["difference"] == pytest.approx(1.0 - random_mean)


def test_pooling_names_tasks_by_bundle_and_refuses_a_name_twice() -> None:
    from envgym.evaluate.summary import across_tasks, pool, summarize
    from envgym.rollout.episode import EpisodeResult

    def run(rewards: dict[str, float]):  # noqa: ANN202
        eps = [
            EpisodeResult(task_id=t, sample=0, reward=r, terminated=True)
            for t, r in rewards.items()
        ]
        return summarize(eps, k=1)

    a, b = run({"t1": 1.0, "t2": 0.0}), run({"t1": 1.0})
    pooled = pool([("A", a), ("B", b)], 1)
    assert pooled.rewards == {"A::t1": 1.0, "A::t2": 0.0, "B::t1": 1.0}
    assert pooled.tasks == 3 and pooled.samples == {"A::t1": 1, "A::t2": 1, "B::t1": 1}
    assert pooled.pass_at_k == across_tasks([1.0, 0.0, 1.0], [1, 1, 1])
    with pytest.raises(ValueError, match="share the name 'A'"):
        pool([("A", a), ("A", b)], 1)
