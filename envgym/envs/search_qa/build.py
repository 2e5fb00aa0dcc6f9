"""Build search-QA bundles from procedural questions, and the cached default bundle.

The bundle is a plain, checkable bundle (docs/BUNDLE.md): its ``state/docs.jsonl`` holds the
documents its questions need (the evidence chain) plus distractors from the same sections, so
the stand-in tools in ``bundle_files/tools.py`` can replay gold solutions inside the sandbox
(``envgym check``) without the full index.  In episodes the search tools run on the full index
(env.py).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envgym.bundle import write_manifest
from envgym.bundle_write import copy_code_files, fresh_bundle_dir, write_tasks
from envgym.cache import source_keyed_bundle
from envgym.envs.search_qa.procedural import QAPair, build_questions
from envgym.tools.search.build import corpus_key, package_document
from envgym.tools.search.debian import Package, load_packages

GENERATOR_VERSION = "search-qa-1"
CATEGORY = "search qa"
_PACKAGE = Path(__file__).resolve().parent
_TEMPLATES = _PACKAGE / "bundle_files"
DESCRIPTION = ("Multi-hop questions about Debian packages (maintainers, sections, dependencies, "
               "versions) answered with search, open and find over a local index of every package.")  # fmt: skip
PROMPT = ("Answer this question about Debian packages. Use the search, open and find tools to look "
          "the facts up (document ids are package names), then call submit_answer once with only "
          "the answer.\n\nQuestion: {question}")  # fmt: skip


def _difficulty(pair: QAPair) -> int:
    return max(1, min(5, pair.hops + (pair.template == "shared_dependency")))


def task_line(pair: QAPair, number: int, wrong: str) -> dict[str, Any]:
    meta = {"answer": pair.answer, "aliases": list(pair.aliases), "kind": pair.kind,
            "evidence": list(pair.evidence), "hops": pair.hops, "template": pair.template,
            "params": [list(p) for p in pair.params]}  # fmt: skip
    return {
        "id": f"q{number:04d}-{pair.template}",
        "prompt": PROMPT.format(question=pair.question),
        "solution": "solve_question",
        "verifier": "verify_answer",
        "difficulty": _difficulty(pair),
        "submit_tool": "submit_answer",
        "metadata": meta,
        "witnesses": [
            {
                "rule": "answer_correct",
                "submission": {"answer": wrong},
                "note": "a plausible wrong entity",
            },
            {"rule": "answer_given", "submission": {"answer": ""}, "note": "nothing submitted"},
        ],
    }


def _wrong_answer(pair: QAPair, packages: dict[str, Package], rng: random.Random) -> str:
    """Same kind as the answer, different: another package's name, maintainer or version."""
    for _ in range(100):
        other = packages[rng.choice(sorted(packages))]
        value = {"version": other.fields.get("Version", ""),
                 "person": other.maintainer.split("<")[0].strip()}.get(pair.kind, other.name)  # fmt: skip
        if value and value.casefold() != pair.answer.casefold() and value not in pair.aliases:
            return value
    return pair.answer + "-not"


def build_bundle(
    out_dir: Path,
    packages: Sequence[Package],
    *,
    n: int = 50,
    seed: int = 0,
    max_hops: int = 3,
    distractors: int = 6,
) -> Path:
    """Write a bundle of ``n`` procedural questions (fewer if the corpus cannot supply them)."""
    out = fresh_bundle_dir(out_dir)
    pairs = build_questions(packages, n, seed=seed, max_hops=max_hops)
    if not pairs:
        raise ValueError("the corpus yields no question")
    return write_bundle(
        out,
        pairs,
        packages,
        seed=seed,
        distractors=distractors,
        provenance={"agent": "procedural:search_qa", "model": None, "seed": seed},
    )


def write_bundle(
    out_dir: Path,
    pairs: Sequence[QAPair],
    packages: Sequence[Package],
    *,
    seed: int,
    provenance: dict[str, Any],
    distractors: int = 6,
    wrong: Sequence[str | None] | None = None,
) -> Path:
    """Write ``pairs`` as a checkable bundle into the fresh ``out_dir`` (procedural or model-made).

    ``wrong[i]`` is the declared wrong-answer witness of pair ``i`` (e.g. a failed candidate
    answer); without one, another entity of the same kind is drawn.
    """
    out = Path(out_dir)
    if not pairs:
        raise ValueError("a search-QA bundle needs at least one question")
    by_name = {p.name: p for p in packages}
    missing = sorted({d for pair in pairs for d in pair.evidence if d not in by_name})
    if missing:
        raise ValueError(f"evidence names documents the corpus lacks: {missing[:5]}")
    by_section: dict[str, list[str]] = {}
    for p in packages:
        by_section.setdefault(p.section, []).append(p.name)
    rng = random.Random(seed)
    keep: dict[str, None] = {}
    tasks = []
    for number, pair in enumerate(pairs):
        for doc_id in pair.evidence:
            keep.setdefault(doc_id, None)
            peers = by_section[by_name[doc_id].section]
            for other in rng.sample(peers, min(distractors, len(peers))):
                keep.setdefault(other, None)
        witness = (wrong[number] if wrong else None) or _wrong_answer(pair, by_name, rng)
        tasks.append(task_line(pair, number, witness))
    (out / "state").mkdir(parents=True)
    with (out / "state" / "docs.jsonl").open("w", encoding="utf-8") as fh:
        for name in sorted(keep):
            doc = package_document(by_name[name])
            fh.write(
                json.dumps({"id": doc.id, "title": doc.title, "body": doc.body}, ensure_ascii=False)
                + "\n"
            )
    write_tasks(out, tasks)
    copy_code_files(_TEMPLATES, out)
    write_manifest(
        out,
        name=f"search-qa-seed{seed}",
        category=CATEGORY,
        description=DESCRIPTION,
        provenance=provenance,
    )
    return out


def default_bundle_dir(*, n: int = 50, seed: int = 0, max_hops: int = 3) -> Path:
    """The registered default bundle, built once per corpus (apt lists) and generator source
    (the question generator, procedural.py over facts.py, lives in this package)."""
    return source_keyed_bundle(
        "search-qa-v0",
        f"{GENERATOR_VERSION}\0{n}\0{seed}\0{max_hops}\0{corpus_key()}",
        (_PACKAGE,),
        lambda out: build_bundle(out, load_packages(), n=n, seed=seed, max_hops=max_hops),
    )
