"""The model roles of search-QA synthesis: prompts, configurations, and reading their replies.

DeepSeek-V3.2 §3.2.3 ("Search Agent"): a question-construction agent explores an entity with
search at a configurable depth and breadth; answer agents with heterogeneous configurations
(checkpoints, system prompts, temperatures) attempt each question; a verification agent with
search checks the ground truth.  Replies are read leniently where intent is clear (the last
JSON object in the text, an ``Answer:`` line) and strictly where it matters (a verdict must say
``correct``; anything else does not verify).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

CONSTRUCT_SYSTEM = (
    "You write hard, unambiguous quiz questions about Debian packages for a search benchmark. "
    "You have tools over an index of every Debian package: search(query, k), open(id, page), "
    "find(id, pattern); document ids are package names.")  # fmt: skip
CONSTRUCT_USER = (
    "Start entity: the package {entity}. Its document:\n\n{document}\n\n"
    "Explore outward from it with the tools: follow {hops} hop(s) — each hop reads a further "
    "document linked to the last one (a dependency, a package by the same maintainer, in the same "
    "section...) — making at most {breadth} searches per hop. Then write ONE question whose "
    "answer needs all {hops} document(s), has exactly one correct answer, and appears verbatim in "
    "one of them (a package name, a version, a maintainer's name, a field value). Do not put the "
    "answer in the question. Reply with only a JSON object: "
    '{{"question": "...", "answer": "...", "evidence": ["<id read first>", "..."]}}')  # fmt: skip
VERIFY_SYSTEM = (
    "You check answers to questions about Debian packages against the package index, using the "
    "tools search, open and find (ids are package names). Be strict: the answer must be exactly "
    "right and the only right answer.")  # fmt: skip
VERIFY_USER = (
    "Question: {question}\nProposed answer: {answer}\nSuggested evidence documents: {evidence}\n\n"
    "Check the facts with the tools. Then reply with only a JSON object: "
    '{{"verdict": "correct" or "incorrect", "reason": "..."}}')  # fmt: skip
ANSWER_USER = (
    "Question: {question}\n\nReply with only the answer on a line starting with 'Answer:'."
)

#: Answer-agent styles: (name, system prompt, temperature, may use tools).  Heterogeneous on
#: purpose: a question one configuration answers is not hard enough to keep.
ANSWER_STYLES: tuple[tuple[str, str, float, bool], ...] = (
    ("closed-book", "You are an expert on Debian. Answer from memory, briefly.", 0.0, False),
    ("searcher", "You answer questions about Debian packages. Look facts up with the tools search, "
                 "open and find (ids are package names) before answering.", 0.7, True),
    ("quick", "Answer quickly and concisely; use the tools if you must.", 1.0, True),
)  # fmt: skip


@dataclass(frozen=True)
class AnswerAgent:
    name: str  # unique in a run: journal keys use it
    model: str
    system: str
    temperature: float
    tools: bool


def answer_agents(models: list[str]) -> list[AnswerAgent]:
    """Every style on every model (``models`` de-duplicated, order kept)."""
    unique = list(dict.fromkeys(m for m in models if m))
    if not unique:
        raise ValueError("at least one answer model is needed")
    many = len(unique) > 1
    return [AnswerAgent(f"{style}@{i}" if many else style, model, system, temperature, tools)
            for i, model in enumerate(unique) for style, system, temperature, tools in ANSWER_STYLES]  # fmt: skip


def last_json_object(text: str) -> dict[str, Any] | None:
    """The last ``{...}`` in ``text`` that parses as a JSON object (fences and prose around it ignored)."""
    decoder = json.JSONDecoder()
    found = None
    for match in re.finditer(r"\{", text or ""):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            found = value
    return found


def read_pair(text: str) -> tuple[dict[str, Any] | None, str]:
    """``(pair, "")`` or ``(None, why)`` from the construction agent's final reply."""
    data = last_json_object(text)
    if data is None:
        return None, "no JSON object in the reply"
    question, answer, evidence = data.get("question"), data.get("answer"), data.get("evidence")
    if not isinstance(question, str) or not question.strip():
        return None, "no question"
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(answer, str) or not answer.strip():
        return None, "no answer"
    if (
        not isinstance(evidence, list)
        or not all(isinstance(e, str) for e in evidence)
        or not evidence
    ):
        return None, "evidence is not a non-empty list of document ids"
    return {
        "question": question.strip(),
        "answer": answer.strip(),
        "evidence": list(dict.fromkeys(evidence)),
    }, ""


def read_answer(text: str) -> str:
    """A candidate's answer: an ``Answer:`` line, a JSON ``answer``, else the whole reply."""
    lines = re.findall(r"(?im)^\s*\**answer\**\s*[:：]\s*(.+?)\s*$", text or "")
    if lines:
        return lines[-1]
    data = last_json_object(text)
    if data is not None and isinstance(data.get("answer"), str):
        return data["answer"]
    return (text or "").strip()


def read_verdict(text: str) -> tuple[bool, str]:
    """``(verified, reason)``: only an explicit ``"verdict": "correct"`` verifies."""
    data = last_json_object(text)
    if data is None or not isinstance(data.get("verdict"), str):
        return False, "no readable verdict"
    verdict = data["verdict"].strip().lower()
    return verdict == "correct", str(data.get("reason") or verdict)[:300]
