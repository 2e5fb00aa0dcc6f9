"""The LLM synthesis agent: its stages with a scripted policy (good and bad replies), the embedded
SmolLM2 end to end, and a vLLM server end to end (heavy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.bundle import load_bundle
from envgym.policy import PolicyError, SamplingParams, Turn, Usage
from envgym.synth_agents.llm_agent import LLMAgent, LLMConfig
from envgym.synth_agents.pipeline import run_synthesis
from envgym.synth_agents.recorder import SynthRecorder
from envgym.synth_agents.validate import REASONS

pytestmark = pytest.mark.timeout(120)

DATA = """Here is the data.
```python data
import sqlite3
con = sqlite3.connect("db.sqlite")
con.execute("CREATE TABLE books (title TEXT PRIMARY KEY, author TEXT, year INTEGER, copies INTEGER)")
con.executemany("INSERT INTO books VALUES (?, ?, ?, ?)", [("Dune", "Herbert", 1965, 3), ("Emma", "Austen", 1815, 1),
    ("Ulysses", "Joyce", 1922, 0), ("Beloved", "Morrison", 1987, 2), ("Hamlet", "Shakespeare", 1603, 4)])
con.commit()
```"""
TOOLS = '''```python tools
from envgym.runtime import sqlite

def list_books() -> list:
    """All book titles."""
    return [r[0] for r in sqlite().execute("SELECT title FROM books ORDER BY title")]

def get_book(title: str) -> dict:
    """One book.

    Args:
        title: The exact title.
    """
    row = sqlite().execute("SELECT * FROM books WHERE title = ?", (title,)).fetchone()
    if row is None:
        raise KeyError(title)
    return dict(row)
```'''
SOLUTION = """```python solution
def solve(tools, task):
    best = None
    for t in tools.list_books():
        b = tools.get_book(title=t)
        if b["copies"] > 0 and b["year"] > task["metadata"]["after"] and (best is None or b["year"] < best["year"]):
            best = b
    tools.submit_result(answer_text=best["title"])
```"""
VERIFIER = """```python verifier
from envgym.runtime import sqlite

def verify(submission, task):
    row = sqlite().execute("SELECT title FROM books WHERE copies > 0 AND year > ? ORDER BY year LIMIT 1",
                           (task["metadata"]["after"],)).fetchone()
    return {"checks": [{"name": "oldest", "passed": submission.get("answer_text") == row[0], "detail": ""}]}
```"""


WITNESSES = """```json witnesses
[{"rule": "oldest", "submission": {"answer_text": "Hamlet"}, "note": "Hamlet is older than the bound"}]
```"""


def task(after: int, witnesses: str = WITNESSES) -> str:
    return (
        (
            '```json task\n{"prompt": "Which available book published after %d is the oldest? Submit its title.", '  # noqa: UP031
            '"metadata": {"after": %d}}\n```\n' % (after, after)
        )
        + SOLUTION
        + "\n"
        + VERIFIER
        + "\n"
        + witnesses
    )


class ScriptedPolicy:
    """A test double for a language model: canned replies, in order (the brief allows it)."""

    version = 0

    def __init__(self, replies: list[str | BaseException]) -> None:
        self.name = "scripted"
        self.replies = list(replies)
        self.seen: list[list[dict]] = []

    async def act(
        self, session: str, messages: list[dict], tools: list[dict], params: SamplingParams
    ) -> Turn:
        self.seen.append(list(messages))
        reply = self.replies.pop(0) if self.replies else "I have nothing more to add."
        if isinstance(reply, BaseException):
            raise reply
        return Turn(text=reply, usage=Usage(completion_tokens=len(reply) // 4))

    async def end_session(self, session: str) -> None:
        pass

    async def aclose(self) -> None:
        pass


def synthesize(
    tmp_path: Path, replies: list, *, category: str = "library loans", n: int = 1, **config: object
) -> tuple[list[dict], ScriptedPolicy]:
    policy = ScriptedPolicy(replies)
    agent = LLMAgent(
        category, policy, model="scripted", config=LLMConfig(**{"max_rounds": 1, **config})
    )
    try:
        run_synthesis(agent, n=n, seed=0, recorder=SynthRecorder(tmp_path / "out", None))
    finally:
        agent.close()
    lines = (tmp_path / "out" / "synth.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines], policy


@pytest.fixture(autouse=True)
def _bwrap(require_backend) -> None:  # noqa: ANN001
    require_backend("bwrap")


def test_good_replies_keep_every_agreeing_level_as_a_task(tmp_path: Path) -> None:
    records, _ = synthesize(
        tmp_path, [DATA, TOOLS, task(1800), task(1900), "no idea"], max_levels=2
    )
    r = records[0]
    assert (r["status"], r["reasons"], r["agent_info"]["levels_passed"]) == ("kept", [], 1)
    assert r["agent_info"]["levels_kept"] == [0, 1] and r["tasks"] == ["task-l0", "task-l1"]
    bundle = load_bundle(tmp_path / "out" / r["bundle"])
    assert [t.metadata for t in bundle.tasks] == [{"after": 1800}, {"after": 1900}]
    assert [(t.difficulty, t.solution, t.verifier) for t in bundle.tasks] == [
        (1, "solve_l0", "verify_l0"),
        (2, "solve_l1", "verify_l1"),
    ]
    assert [[w.rule for w in t.witnesses] for t in bundle.tasks] == [["oldest"], ["oldest"]]
    assert (
        bundle.manifest.provenance.agent == "llm:scripted"
        and bundle.manifest.category == "library loans"
    )
    assert "def submit_result(" in (bundle.root / "tools.py").read_text()  # added by the agent


SQL = """CREATE TABLE books (title TEXT PRIMARY KEY, author TEXT, year INTEGER, copies INTEGER);
INSERT INTO books VALUES ('Dune', 'Herbert', 1965, 3), ('Emma', 'Austen', 1815, 1), ('Ulysses', 'Joyce', 1922, 0),
  ('Beloved', 'Morrison', 1987, 2), ('Hamlet', 'Shakespeare', 1603, 4);"""


@pytest.mark.parametrize("data", [f"```sql\n{SQL}\n```", f"```python\n# the books\n{SQL}\n```"])
def test_sql_data_blocks_are_run_as_sql(tmp_path: Path, data: str) -> None:
    records, _ = synthesize(tmp_path, [data, TOOLS, task(1800)], max_levels=0)
    assert records[0]["status"] == "kept", records[0]["problems"]


def test_jobs_sample_with_their_own_seeds(tmp_path: Path) -> None:
    seeds: list[int | None] = []

    class Recording(ScriptedPolicy):
        async def act(
            self, session: str, messages: list[dict], tools: list[dict], params: SamplingParams
        ) -> Turn:
            seeds.append(params.seed)
            return await super().act(session, messages, tools, params)

    agent = LLMAgent(
        "library loans", Recording(["prose"] * 4), model="scripted", config=LLMConfig(max_rounds=2)
    )
    try:
        run_synthesis(agent, n=2, seed=0, recorder=SynthRecorder(tmp_path / "out", None))
    finally:
        agent.close()
    assert len(seeds) == 4 and len(set(seeds)) == 4


def test_tool_calls_bash_and_search_inside_the_sandbox(tmp_path: Path) -> None:
    script = DATA.split("```python data\n")[1].split("```")[0]
    call = {"name": "bash", "arguments": {"command": f"python3 - <<'EOF'\n{script}\nEOF"}}
    search = {"name": "search", "arguments": {"query": "library loans overdue fines"}}
    replies = [
        f"<tool_call>{json.dumps(search)}</tool_call>",
        f"<tool_call>{json.dumps(call)}</tool_call>",
        "The database is ready.",
        TOOLS,
        task(1800),
    ]
    records, policy = synthesize(tmp_path, replies, max_levels=0)
    assert records[0]["status"] == "kept", records[0]["problems"]
    tool_results = [m for m in policy.seen[2] if m["role"] == "tool"]
    assert "Public library loans" in tool_results[0]["content"]
    assert json.loads(tool_results[1]["content"])["exit_code"] == 0


@pytest.mark.parametrize(
    ("replies", "reason", "detail"),
    [
        (["Sure! A library lends books to members."], "no_data", "no ```python data``` block"),
        (
            ["```python data\nimport sqlite3\ncon = sqlite3.connect('db.sqlite'\n```"],
            "no_data",
            "does not parse",
        ),
        (
            [DATA, "Tools are functions that read the database."],
            "no_tools",
            "no ```python tools``` block",
        ),
        (
            [DATA, "```python tools\ndef get(x):\n    return 1\n```"],
            "no_tools",
            "needs a type hint",
        ),
        ([DATA, TOOLS, "The task is to find a book."], "no_agreement", "no ```json task``` block"),
        (
            [
                DATA,
                TOOLS,
                task(1800).replace(
                    "def solve(tools, task):",
                    "from envgym.runtime import sqlite\ndef solve(tools, task):",
                ),
            ],
            "no_agreement",
            "imports from 'envgym.runtime'",
        ),
        (
            [DATA, TOOLS, task(1800).replace('submission.get("answer_text") == row[0]', "True")],
            "no_agreement",
            "accepts an empty answer",
        ),
    ],
)
def test_bad_replies_are_rejected_with_reasons(
    tmp_path: Path, replies: list, reason: str, detail: str
) -> None:
    records, _ = synthesize(tmp_path, replies, max_levels=0)
    r = records[0]
    assert (r["status"], r["reasons"], r["made"]) == ("rejected", [reason], False)
    assert detail in r["problems"][0]["detail"] and reason in REASONS


def test_a_lenient_verifier_that_passes_the_agent_loop_is_rejected_by_validation(
    tmp_path: Path,
) -> None:
    lenient = task(1800).replace(
        'submission.get("answer_text") == row[0]', 'bool(submission.get("answer_text"))'
    )
    records, _ = synthesize(tmp_path, [DATA, TOOLS, lenient], max_levels=0, require_witnesses=False)
    r = records[0]
    assert (r["status"], r["made"]) == ("rejected", True)
    assert {"corruptions_accepted", "rules_uncovered"} <= set(r["reasons"]), r["reasons"]
    assert (tmp_path / "out" / r["bundle"] / "verifier.py").is_file()  # kept for inspection
    # With witnesses required (the default) the agent itself catches it: its witness cannot fail.
    records, _ = synthesize(tmp_path / "w", [DATA, TOOLS, lenient], max_levels=0)
    assert (records[0]["made"], records[0]["reasons"]) == (False, ["no_witnesses"])
    assert "passes the verifier" in records[0]["problems"][0]["detail"]


@pytest.mark.parametrize(
    ("witnesses", "why"),
    [
        ("", "no ```json witnesses``` block"),
        (
            '```json witnesses\n[{"rule": "newest", "submission": {"answer_text": "Hamlet"}}]\n```',
            "verifier reports only",
        ),
        (
            '```json witnesses\n[{"rule": "oldest", "submission": {"answer_text": "Emma"}}]\n```',
            "passes the verifier",
        ),
        ('```json witnesses\n{"rule": "oldest"}\n```', "non-empty JSON list"),
    ],
)
def test_a_task_without_valid_witnesses_for_every_rule_is_rejected(
    tmp_path: Path, witnesses: str, why: str
) -> None:
    records, _ = synthesize(tmp_path, [DATA, TOOLS, task(1800, witnesses)], max_levels=0)
    r = records[0]
    assert (r["status"], r["made"], r["reasons"]) == ("rejected", False, ["no_witnesses"]), r[
        "problems"
    ]
    assert why in r["problems"][0]["detail"]


def test_a_witness_failing_two_rules_is_not_a_witness(tmp_path: Path) -> None:
    two = VERIFIER.replace(
        '"detail": ""}]}',
        '"detail": ""}, {"name": "named", "passed": '
        'bool(submission.get("answer_text")), "detail": ""}]}',
    )
    reply = task(
        1800,
        '```json witnesses\n[{"rule": "oldest", "submission": {"answer_text": "Hamlet"}}, '
        '{"rule": "named", "submission": {"answer_text": ""}}]\n```',
    ).replace(VERIFIER, two)
    records, _ = synthesize(tmp_path, [DATA, TOOLS, reply], max_levels=0)
    detail = records[0]["problems"][0]["detail"]
    assert (
        records[0]["reasons"] == ["no_witnesses"]
        and "fails ['named', 'oldest'], not exactly ['named']" in detail
    )


@pytest.mark.parametrize(
    ("body", "why"),
    [("while True:\n        pass", "timeout"), ("import os\n    os._exit(1)", "crash")],
)
def test_tools_that_hang_or_crash_are_contained(tmp_path: Path, body: str, why: str) -> None:
    bad = TOOLS.replace(
        '    return [r[0] for r in sqlite().execute("SELECT title FROM books ORDER BY title")]',
        f"    {body}",
    )
    records, _ = synthesize(tmp_path, [DATA, bad], max_levels=0)
    assert records[0]["reasons"] == ["no_tools"] and why in records[0]["problems"][0]["detail"]


@pytest.mark.parametrize("category", ["", "   ", "%%% 123 ###"])
def test_empty_or_absurd_categories_are_rejected_without_asking_the_model(
    tmp_path: Path, category: str
) -> None:
    records, policy = synthesize(tmp_path, [DATA], category=category)
    assert records[0]["reasons"] == ["category_rejected"] and policy.seen == []


def test_a_failing_backend_is_recorded(tmp_path: Path) -> None:
    records, _ = synthesize(tmp_path, [PolicyError("server down after 3 retries")])
    assert (
        records[0]["reasons"] == ["policy_error"]
        and "server down" in records[0]["problems"][0]["detail"]
    )


def test_an_interrupted_run_resumes(tmp_path: Path) -> None:
    good = [DATA, TOOLS, task(1800)]
    with pytest.raises(KeyboardInterrupt):
        synthesize(tmp_path, good + [DATA, KeyboardInterrupt()], n=2, max_levels=0)
    assert [
        json.loads(x)["key"] for x in (tmp_path / "out" / "synth.jsonl").read_text().splitlines()
    ] == ["llm-library-loans-0"]
    records, policy = synthesize(tmp_path, [DATA, TOOLS, task(1900)], n=2, max_levels=0)
    assert [(r["key"], r["status"]) for r in records] == [
        ("llm-library-loans-0", "kept"),
        ("llm-library-loans-1", "kept"),
    ]
    assert len(policy.seen) == 3  # only job 1 ran again


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_embedded_smollm2_runs_end_to_end_and_rejects_with_reasons(tmp_path: Path) -> None:
    config = LLMConfig(
        max_rounds=2,
        max_tool_turns=1,
        max_levels=1,
        params=SamplingParams(temperature=0.7, max_tokens=200, seed=0),
    )
    agent = LLMAgent.from_model("library loans", "smollm2", config)
    try:
        summary = run_synthesis(agent, n=2, seed=0, recorder=SynthRecorder(tmp_path / "out", None))
    finally:
        agent.close()
    assert summary.requested == 2 and summary.validated + sum(summary.rejected.values()) == 2
    for line in (tmp_path / "out" / "synth.jsonl").read_text().splitlines():
        r = json.loads(line)
        assert r["status"] == "kept" or (r["reasons"] and all(x in REASONS for x in r["reasons"]))
        assert (
            r["agent_info"]["turns"] >= 1
            and r["agent_info"]["transcript"][0]["role"] == "assistant"
        )


def test_the_host_never_follows_a_planted_link_to_the_database(tmp_path: Path) -> None:
    from envgym.synth_agents.llm_checks import _read_plain_file

    secret = tmp_path / "host-secret"
    secret.write_bytes(b"host data")
    (tmp_path / "db.sqlite").symlink_to(secret)
    assert _read_plain_file(tmp_path / "db.sqlite") is None
    assert _read_plain_file(secret) == b"host data"
    assert _read_plain_file(tmp_path / "missing") is None


def test_levels_broken_by_replaced_tools_are_dropped(tmp_path: Path) -> None:
    renamed_tools = TOOLS.replace("def get_book(", "def book_info(")
    harder = task(1900).replace("tools.get_book(", "tools.book_info(") + "\n" + renamed_tools
    records, _ = synthesize(tmp_path, [DATA, TOOLS, task(1800), harder], max_levels=1)
    r = records[0]
    assert r["status"] == "kept", r["problems"]
    assert (r["agent_info"]["levels_kept"], r["agent_info"]["levels_dropped"], r["tasks"]) == (
        [1],
        [0],
        ["task-l1"],
    )
    bundle = load_bundle(tmp_path / "out" / r["bundle"])
    assert "def book_info(" in (bundle.root / "tools.py").read_text() and bundle.tasks[
        0
    ].metadata == {"after": 1900}


def test_levels_merge_into_separate_scopes() -> None:
    from envgym.synth_agents.levels import Level, Levels

    helper = "LIMIT = {n}\n\ndef _pick(limit=LIMIT):\n    return limit\n\ndef solve(tools, task):\n    return _pick(limit=LIMIT)\n"
    levels = Levels()
    for n in (0, 1):
        levels.add(
            Level(
                n,
                {"id": f"t{n}", "solution": "solve", "verifier": "check"},
                helper.format(n=n + 10),
                "def check(submission, task):\n    return submission",
            )
        )
    solution, verifier, tasks = levels.merged()
    namespace: dict = {}
    exec(compile(solution, "solution.py", "exec"), namespace)  # noqa: S102 - the test's own code
    assert (namespace["solve_l0"](None, None), namespace["solve_l1"](None, None)) == (10, 11)
    assert [(t["solution"], t["verifier"]) for t in tasks] == [
        ("solve_l0", "verify_l0"),
        ("solve_l1", "verify_l1"),
    ]
    assert "def verify_l1(submission, task):" in verifier
