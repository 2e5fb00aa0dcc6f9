"""envgym/envs/swe/miner.py: candidates from real history, named rejections, scores, judges."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from swe_history import ISSUES, make_history, run_git

from envgym.envs.swe.instance import InstanceError, SweInstance
from envgym.envs.swe.miner import MineLimits, describe, llm_judge, load_issues, mine
from envgym.envs.swe.patch import changed_files, is_test_file
from envgym.envs.swe.repo import GitError, apply_patch, checkout


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    root = tmp_path_factory.mktemp("mine")
    issues = root / "issues.json"
    issues.write_text(json.dumps(ISSUES))
    return root / "calc", make_history(root / "calc"), issues


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVGYM_CACHE", str(tmp_path / "cache"))


def _reasons(result) -> dict[str, str]:
    return dict(result.rejected)


@pytest.mark.timeout(60)
def test_mining_keeps_fixes_with_tests_and_names_every_rejection(history) -> None:
    repo, shas, issues = history
    result = mine(repo, issues=issues)
    by_commit = {c.metadata["commit"]: c for c in result.candidates}
    assert set(by_commit) == {shas["bugfix"], shas["issue_fix"], shas["merge"]}
    reasons = _reasons(result)
    assert reasons[shas["initial"]].startswith("root commit")
    assert reasons[shas["docs"]] == "no test change"
    assert reasons[shas["huge"]] == "too large: 40 files > 20"
    assert reasons[shas["vague"]] == "description too short: only a title ('fix')"
    assert reasons[shas["tests_only"]] == "no source change"
    assert (
        reasons[shas["binary"]].startswith("binary changes")
        and "logo.png" in reasons[shas["binary"]]
    )
    assert len(result.candidates) + len(result.rejected) == 9  # first parent: not "feature"

    fix = by_commit[shas["bugfix"]]
    assert fix.instance_id == f"calc-{shas['bugfix'][:10]}"
    assert fix.base_commit == shas["initial"] and fix.version == "" and fix.repo == str(repo)
    assert fix.problem_statement.startswith("Fix add() returning the difference\n\nadd(2, 3)")
    assert "Signed-off-by" not in fix.problem_statement
    assert changed_files(fix.patch) == ["src/calc/ops.py"]
    assert changed_files(fix.test_patch) == ["tests/test_add.py"]
    assert fix.metadata["source"] == "mined" and fix.metadata["merge"] is False
    assert 0 < fix.metadata["score"] <= 1 and set(fix.metadata["scores"]) == {
        "description",
        "size",
        "tests",
        "issue",
    }

    linked = by_commit[shas["issue_fix"]]
    assert linked.problem_statement.startswith("sub() crashes on None\n\nCalling sub(None, 1)")
    assert linked.metadata["issue"] == 3 and linked.metadata["scores"]["issue"] == 1.0
    assert linked.metadata["score"] > fix.metadata["score"]

    merged = by_commit[shas["merge"]]  # the pull request as a whole, against the first parent
    assert merged.base_commit == shas["issue_fix"] and merged.metadata["merge"] is True
    assert merged.problem_statement.startswith("Add mul() so callers stop")
    assert changed_files(merged.patch) == ["src/calc/mul.py"]


@pytest.mark.timeout(60)
def test_mined_patches_apply_to_their_base(history, tmp_path: Path) -> None:
    repo, _, issues = history
    for n, candidate in enumerate(mine(repo, issues=issues).candidates):
        work = checkout(candidate, candidate.base_commit, tmp_path / str(n))
        assert apply_patch(work, candidate.test_patch).ok
        assert apply_patch(work, candidate.patch).ok
        assert all(is_test_file(f) for f in changed_files(candidate.test_patch))
        assert not any(is_test_file(f) for f in changed_files(candidate.patch))


@pytest.mark.timeout(60)
def test_limits_issues_and_first_parent_change_the_outcome(history) -> None:
    repo, shas, _ = history
    plain = mine(
        repo
    )  # without the issues file "Handle None in sub / Fixes #3" (6 words) is too short
    assert _reasons(plain)[shas["issue_fix"]] == "description too short: 6 words < 8"
    roomy = mine(repo, limits=MineLimits(max_files=50, max_changed_lines=5))
    assert _reasons(roomy)[shas["huge"]] == "too large: 140 changed lines > 5"
    assert _reasons(roomy)[shas["bugfix"]].startswith("too large:")
    every = mine(repo, first_parent=False)
    assert _reasons(every)[shas["feature"]] == "description too short: 2 words < 8"
    recent = mine(repo, limits=MineLimits(max_commits=2))
    assert len(recent.rejected) + len(recent.candidates) == 2


@pytest.mark.timeout(60)
def test_non_python_changes_are_rejected_and_urls_mine_too(tmp_path: Path) -> None:
    repo = tmp_path / "web"
    repo.mkdir()
    run_git(repo, "init", "-q")
    (repo / "app.js").write_text("x\n")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", "start")
    (repo / "app.js").write_text("y\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "app.test.js").write_text("t\n")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", "Make app print y instead of x, which the users asked for")
    result = mine(repo.as_uri())
    assert result.candidates == []
    assert result.rejected[0][1].startswith("non-Python only")
    with pytest.raises(GitError):
        mine(tmp_path / "nowhere")


@pytest.mark.timeout(60)
def test_judge_hook_keeps_rejects_and_survives_a_crash(history) -> None:
    repo, shas, issues = history

    def picky(candidate: SweInstance) -> tuple[bool, str]:
        if candidate.metadata["merge"]:
            return False, "merges are too broad"
        if candidate.metadata.get("issue"):
            raise RuntimeError("boom")
        return True, "clear bug report"

    result = mine(repo, issues=issues, judge=picky)
    assert [c.metadata["commit"] for c in result.candidates] == [shas["bugfix"]]
    assert result.candidates[0].metadata["judge"] == "clear bug report"
    assert _reasons(result)[shas["merge"]] == "judge: merges are too broad"
    assert _reasons(result)[shas["issue_fix"]] == "judge failed: RuntimeError: boom"


def _endpoint(reply: object, status: int = 200, seen: list | None = None) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append((str(request.url), json.loads(request.content)))
        if isinstance(reply, str):
            body = {"choices": [{"message": {"role": "assistant", "content": reply}}]}
            return httpx.Response(status, json=body)
        return httpx.Response(status, content=json.dumps(reply).encode())

    return httpx.Client(transport=httpx.MockTransport(handle))


CANDIDATE = SweInstance(
    "c-1",
    "r",
    "a" * 40,
    "add(2, 3) returns -1 instead of 5.",
    "--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n",
    "",
)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("reply", "status", "verdict"),
    [
        ('{"keep": true, "reason": "states the bug"}', 200, (True, "states the bug")),
        (
            '<think>{"keep": true}</think>Sure: {"keep": false, "reason": "vague"}',
            200,
            (False, "judge: vague"),
        ),
        (
            '```json\n{"keep": false, "reason": "needs the patch"}\n```',
            200,
            (False, "judge: needs the patch"),
        ),
        ("I think yes", 200, (False, "judge reply unreadable")),
        ('{"keep": "yes", "reason": "x"}', 200, (False, "judge reply unreadable")),
        ('{"keep": true', 200, (False, "judge reply unreadable")),
        ({"no": "choices"}, 200, (False, "judge reply unreadable")),
        ({"choices": [{"message": {"content": None}}]}, 200, (False, "judge reply unreadable")),
        ("<html>", 500, None),
    ],
)
def test_llm_judge_reads_replies_defensively(reply, status, verdict) -> None:
    seen: list = []
    judge = llm_judge("http://model.test/v1/", "judge-model", client=_endpoint(reply, status, seen))
    keep, reason = judge(CANDIDATE)
    if verdict is None:
        assert keep is False and reason.startswith("judge unavailable: HTTPStatusError")
    else:
        assert (keep, reason) == verdict
    url, body = seen[0]
    assert url == "http://model.test/v1/chat/completions" and body["model"] == "judge-model"
    assert "add(2, 3) returns -1" in body["messages"][0]["content"]
    assert "src/x.py" in body["messages"][0]["content"]


@pytest.mark.timeout(30)
def test_llm_judge_unreachable_server_is_a_rejection_not_a_crash() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    judge = llm_judge(
        "http://nowhere.test/v1/chat/completions",
        "m",
        client=httpx.Client(transport=httpx.MockTransport(refuse)),
    )
    keep, reason = judge(CANDIDATE)
    assert keep is False and reason.startswith("judge unavailable: ConnectError")


@pytest.mark.timeout(10)
def test_describe_and_bad_issue_files(tmp_path: Path) -> None:
    assert describe("Merge branch 'x' into main\n\nReal words here", {}) == (
        "Real words here",
        None,
    )
    assert describe("Title\n\nCloses #9", {9: "Issue nine"}) == ("Issue nine", 9)
    assert describe("Title\n\nCloses #9", {}) == ("Title\n\nCloses #9", None)
    bad = tmp_path / "issues.json"
    for text in ("{not json", "[1, 2]", '{"x": {"title": "t"}}', '"text"'):
        bad.write_text(text)
        with pytest.raises(InstanceError, match="issues.json"):
            load_issues(bad)
