"""Gold solution of a search-QA task: read the evidence chain, then submit the known answer."""

from __future__ import annotations

from typing import Any


def solve_question(tools: Any, task: dict[str, Any]) -> None:
    meta = task["metadata"]
    for doc_id in meta["evidence"]:  # the documents an agent must read, in order
        tools.open(id=doc_id)
    tools.submit_answer(answer=meta["answer"])
