"""Per-episode overhead of a Harbor task env vs the same task as a native envgym bundle.

The task is envgym/envs/harbor/dataset/word-count (count the words of /app/poem.txt into count.txt).
Harbor side, two backends: ``HarborEnv`` over bwrap (reset = a fresh copy of the built tree; each
call a fresh bwrap jail; grading = tests/test.sh in a jail) and, with ``--docker``, over the
Docker engine of scripts/docker_setup.sh (reset = a fresh container of the task's image; each
call a ``docker exec``; grading = processes killed, fresh /tests and /logs, test.sh by exec).  Native side: a bundle whose ``state/`` holds the poem, tools
``read_file``/``write_file`` and a verifier counting the words, run by ``BundleEnv`` over the
bwrap sandbox.  Both play the same episode: read the poem, write the count, submit.

    PYTHONPATH=. python scripts/harbor_overhead.py [--episodes N] [--docker]

Prints one JSON object: median milliseconds per reset, per tool call and per grading step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envgym.bundle import write_manifest
from envgym.bundle_env import BundleEnv
from envgym.envs.harbor.env import HarborEnv

TASK = Path(__file__).resolve().parents[1] / "envgym" / "envs" / "harbor" / "dataset" / "word-count"

TOOLS = '''
from envgym.runtime import state_dir


def read_file(path: str) -> str:
    """Read a file of the task's state.

    Args:
        path: the file name.
    """
    return (state_dir() / path).read_text()


def write_file(path: str, content: str) -> str:
    """Write a file of the task's state.

    Args:
        path: the file name.
        content: its content.
    """
    (state_dir() / path).write_text(content)
    return "ok"


def submit() -> str:
    """Declare the task done."""
    return "submitted"
'''
SOLUTION = """
def solve(tools, task):
    text = tools.read_file(path="poem.txt")
    tools.write_file(path="count.txt", content=str(len(text.split())) + "\\n")
    tools.submit()
"""
VERIFIER = """
from envgym.runtime import state_dir


def verify(submission, task):
    want = str(len((state_dir() / "poem.txt").read_text().split()))
    path = state_dir() / "count.txt"
    got = path.read_text().strip() if path.exists() else ""
    return {"checks": [{"name": "count", "passed": got == want, "detail": ""}]}
"""


def native_bundle(root: Path) -> Path:
    (root / "state").mkdir(parents=True)
    (root / "state" / "poem.txt").write_bytes((TASK / "environment" / "poem.txt").read_bytes())
    (root / "tools.py").write_text(TOOLS)
    (root / "solution.py").write_text(SOLUTION)
    (root / "verifier.py").write_text(VERIFIER)
    task = {"id": "word-count", "prompt": (TASK / "instruction.md").read_text(), "solution": "solve",
            "verifier": "verify", "difficulty": 1, "submit_tool": "submit", "metadata": {}}  # fmt: skip
    (root / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    write_manifest(
        root, name="word-count-native", category="bench", provenance={"agent": "bench", "seed": 0}
    )
    return root


def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def play(env: Any, read: dict[str, Any], write: dict[str, Any], episodes: int) -> dict[str, float]:
    resets, calls, grades = [], [], []
    for _ in range(episodes):
        ms, _ = timed(lambda: env.reset())
        resets.append(ms)
        ms, _ = timed(lambda: env.step(call("read_file", read)))
        calls.append(ms)
        ms, _ = timed(lambda: env.step(call("write_file", write)))
        calls.append(ms)
        ms, out = timed(lambda: env.step(call("submit", {})))
        grades.append(ms)
        assert out[1] == 1.0, out[4].get("report")
    return {"reset_ms": statistics.median(resets), "call_ms": statistics.median(calls),
            "submit_grade_ms": statistics.median(grades)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--docker", action="store_true", help="also the Docker backend")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for sandbox in ("bwrap", "docker") if args.docker else ("bwrap",):
        ms_make, harbor = timed(lambda: HarborEnv(TASK, sandbox=sandbox))  # noqa: B023
        ms_first, _ = timed(lambda: harbor.reset())  # noqa: B023 - includes the one-time build
        try:
            h = play(
                harbor,
                {"path": "poem.txt"},
                {"path": "count.txt", "content": "21\n"},
                args.episodes,
            )
        finally:
            harbor.close()
        results[f"harbor_{sandbox}"] = {"make_ms": ms_make, "first_reset_ms": ms_first, **h}
    with tempfile.TemporaryDirectory() as tmp:
        bundle = native_bundle(Path(tmp) / "native")
        ms_make_n, native = timed(lambda: BundleEnv(bundle, sandbox="bwrap"))
        ms_first_n, _ = timed(lambda: native.reset())
        try:
            n = play(
                native,
                {"path": "poem.txt"},
                {"path": "count.txt", "content": "21\n"},
                args.episodes,
            )
        finally:
            native.close()
    results["native_bundle_bwrap"] = {"make_ms": ms_make_n, "first_reset_ms": ms_first_n, **n}
    for name in [k for k in results if k.startswith("harbor_")]:
        h = results[name]
        results[f"ratio_{name}_over_native"] = {k: h[k] / n[k] for k in n if k in h and n[k] and k.endswith("_ms")
                                                and k not in ("make_ms", "first_reset_ms")}  # fmt: skip
    print(json.dumps({**results, "episodes": args.episodes}, indent=1))


if __name__ == "__main__":
    main()
