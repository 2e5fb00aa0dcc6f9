"""The in-process backend under the rollout engine's env threads: a call's printed output is
captured for that call only, and the host's own stdout is never left captured.

Swapping ``sys.stdout`` per call raced: a call that started while another ran saved the other's
capture and restored it when done, so the host's stdout stayed captured (``envgym bench scale``
at 8 in-process envs printed nothing, not even its JSON, and exited 0)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

from envgym.sandbox import open_sandbox
from envgym.sandbox.runner import TextCapture

TOOLS = '''
import time


def talk(word: str, pause: float) -> str:
    """Print a word, wait, print it again.

    Args:
        word: what to print.
        pause: seconds to wait in between.
    """
    print(word)
    time.sleep(pause)
    print(word)
    return word
'''


def test_overlapping_calls_keep_their_own_output(
    make_bundle: Callable[..., Path], tmp_path: Path
) -> None:
    bundle = make_bundle(TOOLS)
    boxes = [open_sandbox(bundle, "inprocess") for _ in range(2)]
    for i, box in enumerate(boxes):
        state = tmp_path / f"s{i}"
        state.mkdir()
        box.reset(state)
    outputs: dict[str, str] = {}
    before = sys.stdout

    def call(i: int, word: str, pause: float) -> None:
        outputs[word] = boxes[i].call_tool("talk", {"word": word, "pause": pause}).stdout

    first = threading.Thread(target=call, args=(0, "alpha", 0.3))
    second = threading.Thread(target=call, args=(1, "beta", 0.6))
    first.start()
    threading.Event().wait(0.1)  # beta starts while alpha runs, and ends after it
    second.start()
    first.join()
    second.join()
    try:
        assert not isinstance(sys.stdout, TextCapture) and not isinstance(sys.stderr, TextCapture)
        assert outputs == {"alpha": "alpha\nalpha\n", "beta": "beta\nbeta\n"}
    finally:
        if isinstance(sys.stdout, TextCapture):
            sys.stdout = before
        for box in boxes:
            box.close()


def test_closing_while_other_threads_import(
    make_bundle: Callable[..., Path], tmp_path: Path
) -> None:
    """close() drops the bundle's modules from sys.modules while other threads add theirs."""
    import types

    bundle = make_bundle(TOOLS)
    boxes = [open_sandbox(bundle, "inprocess") for _ in range(40)]
    for box in boxes:
        box.describe_tools()
    stop = threading.Event()

    def churn() -> None:  # what other envs' imports do to sys.modules meanwhile
        i = 0
        while not stop.is_set():
            name = f"_envgym_test_churn_{threading.get_ident()}_{i % 50}"
            sys.modules[name] = types.ModuleType(name)
            sys.modules.pop(name, None)
            i += 1

    errors: list[BaseException] = []

    def close(box: object) -> None:
        try:
            for _ in range(200):
                box.close()  # type: ignore[attr-defined]
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    churners = [threading.Thread(target=churn) for _ in range(2)]
    for t in churners:
        t.start()
    try:
        closers = [threading.Thread(target=close, args=(box,)) for box in boxes]
        for t in closers:
            t.start()
        for t in closers:
            t.join()
    finally:
        stop.set()
        for t in churners:
            t.join()
    assert errors == []
