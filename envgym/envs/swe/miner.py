"""Candidate SWE instances from a repository's own history.

Each first-parent commit of `rev` (a merge is diffed against its first parent, i.e. the pull
request as a whole) that changes both source and tests becomes a candidate: its message (or the
issue it says it fixes) is the problem statement, its non-test files the gold patch and its test
files the hidden test patch, at its parent as base commit.  Cheap heuristics reject the rest with
a named reason; an optional judge (`llm_judge`: any OpenAI-compatible chat endpoint) then asks
whether the statement is solvable without seeing the patch.  Fail-to-pass tests are not known
here: validation runs the tests later.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from envgym.envs.swe.instance import InstanceError, SweInstance
from envgym.envs.swe.patch import changed_files, is_test_file, split_patch
from envgym.envs.swe.repo import GitError, git, open_source, resolve_source

Judge = Callable[[SweInstance], tuple[bool, str]]

_FIXES = re.compile(r"\b(?:fix(?:e[sd])?|close[sd]?|resolve[sd]?)\s*:?\s+#(\d+)", re.IGNORECASE)
_MERGE_TITLE = re.compile(r"^Merge (?:pull request #\d+ from \S+|branch \S+.*|remote-tracking .*)$")
_TRAILER = re.compile(
    r"^(?:Signed-off-by|Co-authored-by|Reviewed-by|Acked-by|Change-Id|"
    r"Cc|Tested-by|Reported-by):",
    re.IGNORECASE,
)
# Titles that say a change happened but not what problem it solves.
_VAGUE = frozenset(
    {
        "fix",
        "fixes",
        "fixed",
        "bugfix",
        "bug fix",
        "wip",
        "update",
        "updates",
        "typo",
        "minor",
        "cleanup",
        "tweak",
        "changes",
        "misc",
        "refactor",
        "test",
        "tests",
        "more tests",
        "fix tests",
        "fix bug",
        "small fix",
        "oops",
    }
)


@dataclass(frozen=True)
class MineLimits:
    max_commits: int = 2000  # how far back to look
    max_files: int = 20  # changed files, source and tests together
    max_changed_lines: int = 1000  # added + deleted lines
    min_description_words: int = 8


@dataclass(frozen=True)
class MineResult:
    candidates: list[SweInstance]
    rejected: list[tuple[str, str]]  # (commit sha, reason); reasons start with a fixed name


@dataclass(frozen=True)
class _Commit:
    sha: str
    parents: tuple[str, ...]
    date: str
    message: str


def _commits(source: Path, rev: str, limit: int, first_parent: bool) -> list[_Commit]:
    fmt = "%H%x1f%P%x1f%aI%x1f%B%x1e"
    args = [
        "log",
        "--no-show-signature",
        f"--format={fmt}",
        f"--max-count={limit}",
        "--end-of-options",
        rev,
        "--",
    ]
    if first_parent:
        args.insert(1, "--first-parent")
    out = git(args, cwd=source).stdout
    commits = []
    for record in out.split("\x1e"):
        record = record.lstrip("\n")
        if not record:
            continue
        sha, parents, date, message = record.split("\x1f", 3)
        commits.append(_Commit(sha, tuple(parents.split()), date, message.strip()))
    return commits


def _numstat(source: Path, parent: str, sha: str) -> list[tuple[str, int | None]]:
    """(path, added + deleted lines or None for a binary file) per changed file."""
    out = git(
        ["diff", "--numstat", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", parent, sha],
        cwd=source,
    ).stdout
    files = []
    for entry in out.split("\0"):
        if not entry:
            continue
        added, deleted, path = entry.split("\t", 2)
        files.append((path, None if added == "-" else int(added) + int(deleted)))
    return files


def load_issues(path: str | os.PathLike[str]) -> dict[int, str]:
    """Issue texts by number from a JSON file: a list of GitHub issue objects (`number`, `title`,
    `body`) or an object mapping numbers to such objects or to plain text."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InstanceError(f"cannot read issues: {exc}", where=str(path)) from None
    items: list[tuple[Any, Any]]
    if isinstance(data, list):
        items = [(d.get("number") if isinstance(d, dict) else None, d) for d in data]
    elif isinstance(data, dict):
        items = list(data.items())
    else:
        raise InstanceError("expected a JSON list or object of issues", where=str(path))
    issues: dict[int, str] = {}
    for number, issue in items:
        try:
            key = int(number)
        except (TypeError, ValueError):
            raise InstanceError(
                f"issue without a number: {str(issue)[:80]}", where=str(path), field="number"
            ) from None
        if isinstance(issue, str):
            issues[key] = issue.strip()
        elif isinstance(issue, dict):
            title, body = str(issue.get("title") or ""), str(issue.get("body") or "")
            issues[key] = f"{title}\n\n{body}".strip()
        else:
            raise InstanceError(f"issue #{key} is neither text nor an object", where=str(path))
    return issues


def describe(message: str, issues: Mapping[int, str]) -> tuple[str, int | None]:
    """(problem statement, linked issue number): the issue's text if the message says it fixes a
    known one, else the message without merge boilerplate and trailers."""
    for match in _FIXES.finditer(message):
        number = int(match.group(1))
        if issues.get(number):
            return issues[number], number
    lines = [line for line in message.splitlines() if not _TRAILER.match(line.strip())]
    if lines and _MERGE_TITLE.match(lines[0].strip()):
        lines = lines[1:]
    return "\n".join(lines).strip(), None


def _too_vague(statement: str, min_words: int) -> str:
    words = statement.split()
    if "\n" not in statement.strip() and statement.strip(" .!:").lower() in _VAGUE:
        return f"description too short: only a title ({statement.strip()!r})"
    if len(words) < min_words:
        return f"description too short: {len(words)} words < {min_words}"
    return ""


def _repo_name(repo: str) -> str:
    name = repo.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    # ASCII only, no leading dot or dash: the name starts every instance id (instance.ID_PATTERN)
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".-")[:80] or "repo"


def mine(
    repo: str | os.PathLike[str],
    *,
    repo_url: str = "",
    rev: str = "HEAD",
    limits: MineLimits | None = None,
    issues: str | os.PathLike[str] | None = None,
    judge: Judge | None = None,
    first_parent: bool = True,
) -> MineResult:
    """Propose instances from the history of `repo` (a path or URL; see `repo.resolve_source`)."""
    limits = limits or MineLimits()
    if rev.startswith("-") or not rev.isprintable():
        raise GitError(f"not a revision: {rev[:100]!r}")
    source = resolve_source(repo, repo_url)
    known_issues = load_issues(issues) if issues is not None else {}
    repo_text = os.fspath(repo)
    # A local path names the repository by its folder; a URL (or "owner/name") by its last part.
    name = _repo_name(str(source) if Path(repo_text).exists() else (repo_url or repo_text))
    # Git reads the repository through a view of ours: its own config (a textconv or filter
    # driver, say) is never read, so no program of the repository's runs here.
    with open_source(source) as view:
        return _mine(
            view, name, repo_text, repo_url, rev, limits, known_issues, judge, first_parent
        )


def _mine(
    source: Path,
    name: str,
    repo_text: str,
    repo_url: str,
    rev: str,
    limits: MineLimits,
    known_issues: Mapping[int, str],
    judge: Judge | None,
    first_parent: bool,
) -> MineResult:
    candidates: list[SweInstance] = []
    rejected: list[tuple[str, str]] = []
    for commit in _commits(source, rev, limits.max_commits, first_parent):
        if not commit.parents:
            rejected.append((commit.sha, "root commit: nothing to diff against"))
            continue
        parent = commit.parents[0]
        files = _numstat(source, parent, commit.sha)
        statement, issue = describe(commit.message, known_issues)
        reason, scores = _screen(files, statement, issue, limits)
        if reason:
            rejected.append((commit.sha, reason))
            continue
        full = git(
            [
                "diff",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                "--no-renames",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                parent,
                commit.sha,
            ],
            cwd=source,
        ).stdout
        patch, test_patch = split_patch(full)
        metadata: dict[str, Any] = {
            "source": "mined",
            "commit": commit.sha,
            "score": scores.pop("score"),
            "scores": scores,
            "merge": len(commit.parents) > 1,
        }
        if issue is not None:
            metadata["issue"] = issue
        candidate = SweInstance(
            instance_id=f"{name}-{commit.sha[:10]}",
            repo=repo_text,
            base_commit=parent,
            problem_statement=statement,
            patch=patch,
            test_patch=test_patch,
            created_at=commit.date,
            repo_url=repo_url,
            metadata=metadata,
        )
        if judge is not None:
            try:
                keep, why = judge(candidate)
            except Exception as exc:  # noqa: BLE001 - a judge's bug costs this candidate, not the run
                keep, why = False, f"judge failed: {type(exc).__name__}: {exc}"
            if not keep:
                rejected.append((commit.sha, why if why.startswith("judge") else f"judge: {why}"))
                continue
            candidate = replace(candidate, metadata={**candidate.metadata, "judge": why})
        candidates.append(candidate)
    return MineResult(candidates, rejected)


def _screen(
    files: list[tuple[str, int | None]], statement: str, issue: int | None, limits: MineLimits
) -> tuple[str, dict[str, float]]:
    """(rejection reason or "", scores) for one commit's changed files and statement."""
    binary = [path for path, lines in files if lines is None]
    if binary:
        return f"binary changes: {binary[:5]}", {}
    tests = [(p, n or 0) for p, n in files if is_test_file(p)]
    sources = [(p, n or 0) for p, n in files if not is_test_file(p)]
    if not tests:
        return "no test change", {}
    if not sources:
        return "no source change", {}
    if not any(p.endswith(".py") for p, _ in sources):
        return "non-Python only: no .py source file changed", {}
    changed = sum(n for _, n in files)
    if len(files) > limits.max_files:
        return f"too large: {len(files)} files > {limits.max_files}", {}
    if changed > limits.max_changed_lines:
        return f"too large: {changed} changed lines > {limits.max_changed_lines}", {}
    vague = _too_vague(statement, limits.min_description_words)
    if vague:
        return vague, {}
    source_lines, test_lines = sum(n for _, n in sources), sum(n for _, n in tests)
    scores = {
        "description": round(min(1.0, len(statement.split()) / 60), 3),
        "size": round(1.0 - changed / max(1, limits.max_changed_lines), 3),
        "tests": round(min(1.0, test_lines / max(1, source_lines)), 3),
        "issue": 1.0 if issue is not None else 0.0,
    }
    weights = {"description": 0.4, "size": 0.3, "tests": 0.2, "issue": 0.1}
    scores["score"] = round(sum(weights[k] * scores[k] for k in weights), 3)
    return "", scores


_JUDGE_PROMPT = """You review candidate software-engineering tasks mined from a repository's \
history. A developer will get only the description below and the repository before the change; \
hidden tests then check their fix.

Description:
<<<
{statement}
>>>

Files the real change touched: {files}

Does the description state a problem (a bug, or a missing behaviour) clearly enough that a \
developer could solve it without seeing the patch? Reply with only a JSON object: \
{{"keep": true or false, "reason": "one sentence"}}"""


def _parse_verdict(text: str) -> tuple[bool, str] | None:
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL)
    decoder = json.JSONDecoder()
    for start in [m.start() for m in re.finditer(r"\{", text)]:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("keep"), bool):
            reason = obj.get("reason", "")
            return obj["keep"], reason if isinstance(reason, str) else json.dumps(reason)
    return None


def llm_judge(
    model_url: str,
    model_name: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 60.0,
    client: httpx.Client | None = None,
) -> Judge:
    """A judge asking an OpenAI-compatible chat endpoint (`model_url` like ``http://host/v1``).

    Never raises: an unreachable server gives ``(False, "judge unavailable: ...")`` and a reply
    without a ``{"keep": bool, "reason": str}`` object ``(False, "judge reply unreadable")``.
    """
    url = model_url.rstrip("/")
    if not url.endswith("/chat/completions"):
        url += "/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    http = client or httpx.Client(timeout=timeout_s)

    def judge(candidate: SweInstance) -> tuple[bool, str]:
        files = sorted({*changed_files(candidate.patch), *changed_files(candidate.test_patch)})
        prompt = _JUDGE_PROMPT.format(
            statement=candidate.problem_statement[:8000], files=", ".join(files[:30]) or "(none)"
        )
        body = {
            "model": model_name,
            "temperature": 0.0,
            "max_tokens": 512,
            "messages": [{"role": "user", "content": prompt}],
        }
        try:
            response = http.post(url, json=body, headers=headers, timeout=timeout_s)
            response.raise_for_status()
            content = response.json()["choices"][0]["message"]["content"]
        except httpx.HTTPError as exc:
            return False, f"judge unavailable: {type(exc).__name__}: {exc}"
        except (ValueError, KeyError, IndexError, TypeError):
            return False, "judge reply unreadable"
        verdict = _parse_verdict(content) if isinstance(content, str) else None
        if verdict is None:
            return False, "judge reply unreadable"
        keep, reason = verdict
        return keep, f"judge: {reason}" if not keep else reason

    return judge
