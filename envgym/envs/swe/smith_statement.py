"""Problem statements for synthesized instances: a template from the failing tests, or a model.

A synthesized bug has no issue text, so one is written from what a user would see: the names of
the tests that broke and their assertion messages.  The template never names the mutated file,
function or line (the task is to find them).  A ``describe`` hook — e.g. :func:`llm_describer`,
an OpenAI-compatible chat endpoint asked to phrase it as a bug report — may replace it; a reply
that is not usable text, or that quotes a line of the fix or a diff, falls back to the template.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

MAX_LISTED = 5
MIN_CHARS, MAX_CHARS = 40, 8000


@dataclass(frozen=True)
class FailedTest:
    test_id: str
    message: str  # the first line of pytest's crash message ("" when none)


# (repository name, the tests that broke) -> an issue text, or None to use the template.
Describer = Callable[[str, Sequence[FailedTest]], "str | None"]


def template_statement(repo_name: str, failures: Sequence[FailedTest]) -> str:
    count = len(failures)
    lines = [
        f"{count} test{'s' if count != 1 else ''} of {repo_name} fail{'s' if count == 1 else ''} "
        "on the current code:",
        "",
    ]
    for failure in failures[:MAX_LISTED]:
        message = _first_line(failure.message)
        lines.append(f"- `{failure.test_id}`" + (f": {message}" if message else ""))
    if count > MAX_LISTED:
        lines.append(f"- ... and {count - MAX_LISTED} more")
    lines += [
        "",
        "The tests describe the intended behaviour and are correct; the library code is at "
        "fault. Find the bug and fix it in the source so that these tests pass again without "
        "breaking any other test. Do not change the tests.",
    ]
    return "\n".join(lines)


def _first_line(text: str) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line[:200] + ("..." if len(line) > 200 else "")


def write_statement(
    repo_name: str,
    failures: Sequence[FailedTest],
    fix_lines: Sequence[str],
    describe: Describer | None,
) -> tuple[str, str]:
    """(statement, "model" | "template" | "template (model reply unusable: why)")."""
    template = template_statement(repo_name, failures)
    if describe is None:
        return template, "template"
    try:
        reply = describe(repo_name, failures)
    except Exception as exc:  # noqa: BLE001 — a describer is user code; any failure means the template
        return template, f"template (describer failed: {type(exc).__name__})"
    problem = _unusable(reply, fix_lines)
    if problem:
        return template, f"template (model reply unusable: {problem})"
    assert isinstance(reply, str)
    return reply.strip(), "model"


def _unusable(reply: object, fix_lines: Sequence[str]) -> str:
    if reply is None:
        return "no reply"
    if not isinstance(reply, str):
        return f"not text ({type(reply).__name__})"
    text = reply.strip()
    if not MIN_CHARS <= len(text) <= MAX_CHARS:
        return f"{len(text)} characters (want {MIN_CHARS}..{MAX_CHARS})"
    if "diff --git" in text or "\n@@ " in text or text.startswith("@@ "):
        return "contains a diff"
    for line in fix_lines:
        if len(line.strip()) >= 8 and line.strip() in text:
            return "quotes the fix"
    return ""


_PROMPT = """You write bug reports for the Python project {repo}. These tests fail:

{failures}

Write a short GitHub issue (title line, then 2-6 sentences) describing the wrong behaviour a user
would observe, as its reporter would. Do not guess at the cause, do not name source files or
functions that are not in the test names, do not propose a fix and do not include code diffs.
Reply with the issue text only."""


def llm_describer(
    model_url: str,
    model_name: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 60.0,
    client: httpx.Client | None = None,
) -> Describer:
    """A describer asking an OpenAI-compatible ``/chat/completions`` endpoint; ``None`` on any failure."""
    url = model_url.rstrip("/")
    if not url.endswith("/chat/completions"):
        url += "/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    http = client or httpx.Client(timeout=timeout_s)

    def describe(repo_name: str, failures: Sequence[FailedTest]) -> str | None:
        listed = "\n".join(f"- {f.test_id}: {_first_line(f.message)}" for f in failures[:10])
        body = {
            "model": model_name,
            "temperature": 0.0,
            "max_tokens": 600,
            "messages": [
                {"role": "user", "content": _PROMPT.format(repo=repo_name, failures=listed)}
            ],
        }
        try:
            response = http.post(url, json=body, headers=headers, timeout=timeout_s)
            response.raise_for_status()
            content = response.json()["choices"][0]["message"]["content"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            return None
        return content if isinstance(content, str) else None

    return describe
