"""The sandbox contract, the same on every backend: ops, replies, errors, state, latency."""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envgym.bundle import BundleError
from envgym.sandbox import CallError, Limits, Sandbox, SandboxUnavailable, open_sandbox

TOOLS = '''
import enum
from envgym.runtime import sqlite

_calls = 0


class Unit(enum.Enum):
    CENTS = "cents"
    EUROS = "euros"


def price(name: str, unit: Unit = Unit.CENTS) -> float:
    """The price of an item.

    Args:
        name: the item.
        unit: cents or euros.
    """
    row = sqlite().execute("SELECT price FROM items WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise KeyError(f"no item {name!r}")
    return row[0] if unit is Unit.CENTS else row[0] / 100


def bump() -> int:
    """Increment the counter."""
    db = sqlite()
    db.execute("UPDATE counter SET n = n + 1")
    return db.execute("SELECT n FROM counter").fetchone()[0]


def counter() -> int:
    """The counter."""
    return sqlite().execute("SELECT n FROM counter").fetchone()[0]


def module_calls() -> int:
    """How often this module's copy was called (module globals are per sandbox)."""
    global _calls
    _calls += 1
    return _calls


def chatty(n: int) -> str:
    """Print n characters."""
    print("x" * n)
    return "done"


def odd(kind: str) -> int:
    """Return something that is not JSON."""
    if kind == "set":
        return {1, 2}
    if kind == "nan":
        return float("nan")
    if kind == "big":
        return "y" * 3_000_000
    raise ValueError(kind)


def out_of_memory() -> None:
    """Raise MemoryError."""
    raise MemoryError


def leave() -> None:
    """sys.exit() in a tool."""
    import sys
    sys.exit(3)


def submit(answer: str) -> str:
    """Submit the answer.

    Args:
        answer: the answer.
    """
    return "ok"


def _private() -> None:
    pass
'''

SOLUTION = """
def solve(tools, task):
    total = tools.price("apple") + tools.price(name="pear")
    tools.submit(answer=str(total))


def list_tools(tools, task):
    tools.submit(answer=",".join(n for n in dir(tools) if not n.startswith("__")))


def submit_twice(tools, task):
    tools.submit(answer="1")
    tools.submit(answer="2")


def broken(tools, task):
    tools.price("banana")


def final_message(tools, task):
    return "forty-two"
"""

VERIFIER = """
from envgym.runtime import sqlite


def verify(submission, task):
    want = sum(r[0] for r in sqlite().execute("SELECT price FROM items WHERE name IN ('apple', 'pear')"))
    ok = submission.get("answer") == str(want)
    return {"checks": [{"name": "total", "passed": ok, "detail": "" if ok else f"want {want}"}]}


def not_a_dict(submission, task):
    return [1]
"""

TOOL_NAMES = [
    "bump",
    "chatty",
    "counter",
    "leave",
    "module_calls",
    "odd",
    "out_of_memory",
    "price",
    "submit",
]
BACKENDS = ["inprocess", "bwrap", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, require_backend: Callable[[str], None]) -> str:
    require_backend(request.param)
    return request.param


def fresh_state(bundle: Path, dest: Path) -> Path:
    shutil.copytree(bundle / "state", dest)
    return dest


@pytest.fixture
def bundle(make_bundle: Callable[..., Path]) -> Path:
    return make_bundle(TOOLS, SOLUTION, VERIFIER)


@pytest.fixture
def box(bundle: Path, backend: str, tmp_path: Path) -> Iterator[Sandbox]:
    limits = Limits(call_timeout_s=5, max_stdout_bytes=1000, max_reply_bytes=1024**2)
    with open_sandbox(bundle, backend, limits) as sandbox:
        sandbox.reset(fresh_state(bundle, tmp_path / "episode1"))
        yield sandbox


def test_describe_tools(box: Sandbox) -> None:
    specs = {s.name: s for s in box.describe_tools()}
    assert sorted(specs) == TOOL_NAMES
    assert specs["price"].description == "The price of an item."
    assert specs["price"].parameters["properties"]["unit"] == {
        "type": "string",
        "enum": ["cents", "euros"],
        "default": "cents",
        "description": "cents or euros.",
    }


def test_calls_read_and_write_the_episode_state(box: Sandbox, tmp_path: Path) -> None:
    assert box.call_tool("price", {"name": "apple"}).value == 3
    assert box.call_tool("price", {"name": "pear", "unit": "euros"}).value == 0.05  # Enum coerced
    assert [box.call_tool("bump", {}).value for _ in range(2)] == [1, 2]
    outcome = box.call_tool("counter", {})
    assert outcome.ok and outcome.value == 2 and outcome.error is None and outcome.duration_s > 0
    db = sqlite3.connect(tmp_path / "episode1" / "db.sqlite")  # the host's copy changed
    assert db.execute("SELECT n FROM counter").fetchone()[0] == 2


def test_reset_switches_state(box: Sandbox, bundle: Path, tmp_path: Path) -> None:
    assert box.call_tool("bump", {}).value == 1
    box.reset(fresh_state(bundle, tmp_path / "episode2"))
    assert box.call_tool("counter", {}).value == 0
    box.reset(tmp_path / "episode1")
    assert box.call_tool("counter", {}).value == 1


def test_exception_has_short_bundle_traceback(box: Sandbox, tmp_path: Path) -> None:
    outcome = box.call_tool("price", {"name": "banana"})
    assert not outcome.ok and outcome.error is CallError.EXCEPTION
    assert outcome.message.startswith(
        'Traceback (most recent call last):\n  File "tools.py", line '
    )
    assert outcome.message.endswith("KeyError: \"no item 'banana'\"")
    assert str(tmp_path) not in outcome.message and "/bundle" not in outcome.message
    assert "runner.py" not in outcome.message


def test_bad_enum_value_is_the_tools_error(box: Sandbox) -> None:
    outcome = box.call_tool("price", {"name": "apple", "unit": "dollars"})
    assert outcome.error is CallError.EXCEPTION
    assert outcome.message.endswith("ValueError: 'dollars' is not a valid Unit")


def test_not_found(box: Sandbox) -> None:
    assert box.call_tool("nope", {}).error is CallError.NOT_FOUND
    assert box.call_tool("_private", {}).error is CallError.NOT_FOUND
    assert box.solve("missing", {}, "submit").outcome.error is CallError.NOT_FOUND
    assert box.solve("solve", {}, "no_such_tool").outcome.error is CallError.NOT_FOUND
    assert box.verify("missing", {}, {}).error is CallError.NOT_FOUND


def test_printed_output_is_captured_and_capped(box: Sandbox) -> None:
    outcome = box.call_tool("chatty", {"n": 5})
    assert outcome.ok and outcome.stdout == "xxxxx\n"
    outcome = box.call_tool("chatty", {"n": 50_000})
    assert outcome.ok and len(outcome.stdout) < 1200 and "dropped" in outcome.stdout
    assert box.call_tool("counter", {}).stdout == ""


@pytest.mark.parametrize("kind", ["set", "nan"])
def test_non_json_return_is_an_error(box: Sandbox, kind: str) -> None:
    outcome = box.call_tool("odd", {"kind": kind})
    assert outcome.error is CallError.EXCEPTION
    assert "not JSON-compatible" in outcome.message


def test_output_too_large(box: Sandbox) -> None:
    outcome = box.call_tool("odd", {"kind": "big"})
    assert outcome.error is CallError.OUTPUT_TOO_LARGE
    assert "over the limit of 1048576 bytes" in outcome.message
    assert box.call_tool("counter", {}).ok


def test_memory_error_and_sys_exit(box: Sandbox) -> None:
    assert box.call_tool("out_of_memory", {}).error is CallError.MEMORY
    outcome = box.call_tool("leave", {})
    assert outcome.error is CallError.EXCEPTION and outcome.message.endswith("SystemExit: 3")
    assert box.call_tool("counter", {}).ok


def test_solve_records_calls_and_submission(box: Sandbox) -> None:
    solved = box.solve("solve", {"id": "t"}, "submit")
    assert solved.outcome.ok, solved.outcome.message
    assert solved.calls == [
        ("price", {"name": "apple"}),
        ("price", {"name": "pear"}),
        ("submit", {"answer": "8"}),
    ]
    assert solved.submission == {"answer": "8"}
    report = box.verify("verify", solved.submission, {"id": "t"})
    assert report.ok and report.value == {
        "checks": [{"name": "total", "passed": True, "detail": ""}]
    }
    assert box.verify("verify", {"answer": "9"}, {}).value["checks"][0]["passed"] is False


def test_solve_tools_object_exposes_only_tools(box: Sandbox) -> None:
    solved = box.solve("list_tools", {}, "submit")
    assert solved.submission == {"answer": ",".join(TOOL_NAMES)}


def test_solve_errors(box: Sandbox) -> None:
    twice = box.solve("submit_twice", {}, "submit")
    assert twice.outcome.error is CallError.EXCEPTION
    assert "submit called after submit ended the episode" in twice.outcome.message
    assert twice.submission == {"answer": "1"}
    broken = box.solve("broken", {}, "submit")
    assert broken.outcome.error is CallError.EXCEPTION
    assert (
        'File "solution.py"' in broken.outcome.message
        and 'File "tools.py"' in broken.outcome.message
    )
    assert broken.calls == [("price", {"name": "banana"})] and broken.submission is None
    final = box.solve("final_message", {}, None)
    assert final.outcome.ok and final.submission == {"content": "forty-two"}


def test_verifier_must_return_a_dict(box: Sandbox) -> None:
    outcome = box.verify("not_a_dict", {}, {})
    assert outcome.error is CallError.EXCEPTION and "expected a report dict" in outcome.message


def test_calls_before_reset_fail_cleanly(bundle: Path, backend: str) -> None:
    with open_sandbox(bundle, backend) as sandbox:
        outcome = sandbox.call_tool("counter", {})
        assert (
            outcome.error is CallError.EXCEPTION and "no episode state is active" in outcome.message
        )


@pytest.mark.parametrize(
    ("tools", "needle"),
    [
        ("def f(x: int) -> int:\n    return x +\n", "tools.py: tools.py line 2: SyntaxError"),
        (
            "def f(x) -> int:\n    return 1\n",
            "tools.py line 1: tool f, parameter 'x': missing type hint",
        ),
        ("import json\n\nraise RuntimeError('boom')\n", "tools.py line 3: failed to import"),
        ("import no_such_module\n", "ModuleNotFoundError: No module named 'no_such_module'"),
    ],
)
def test_malformed_tools_raise_bundle_error(
    make_bundle: Callable[..., Path], backend: str, tools: str, needle: str
) -> None:
    with open_sandbox(make_bundle(tools), backend) as sandbox:
        with pytest.raises(BundleError) as err:
            sandbox.describe_tools()
        assert err.value.file == "tools.py"
        assert needle in str(err.value)
        assert sandbox.call_tool("f", {"x": 1}).error is CallError.EXCEPTION


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="valid backends: bwrap, docker, inprocess"):
        open_sandbox(".", "firecracker")


def test_inprocess_sandboxes_do_not_share_modules_or_state(bundle: Path, tmp_path: Path) -> None:
    a, b = open_sandbox(bundle, "inprocess"), open_sandbox(bundle, "inprocess")
    a.reset(fresh_state(bundle, tmp_path / "a"))
    b.reset(fresh_state(bundle, tmp_path / "b"))
    assert [a.call_tool("bump", {}).value for _ in range(3)] == [1, 2, 3]
    assert b.call_tool("counter", {}).value == 0
    assert [a.call_tool("module_calls", {}).value for _ in range(2)] == [1, 2]
    assert b.call_tool("module_calls", {}).value == 1
    assert not (bundle / "__pycache__").exists()  # the bundle (and its content hash) untouched
    a.close()
    b.close()


def test_many_calls_in_a_row(box: Sandbox, backend: str) -> None:
    """A thousand round trips on one worker, all answered correctly.  Latency is measured by
    ``envgym bench env-step`` (tests never assert timings)."""
    values = {box.call_tool("price", {"name": "apple"}).value for _ in range(1000)}
    assert values == {3}


def test_sandbox_unavailable_names_the_problem(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envgym.sandbox import bwrap, docker_backend

    monkeypatch.setattr(bwrap, "BWRAP", "/nonexistent/bwrap")
    monkeypatch.setattr(bwrap, "_probed", {})
    with pytest.raises(SandboxUnavailable, match="bubblewrap not found at /nonexistent/bwrap"):
        open_sandbox(bundle, "bwrap")
    with pytest.raises(SandboxUnavailable, match="bubblewrap not found"):  # cached verdict
        open_sandbox(bundle, "bwrap")
    monkeypatch.undo()
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailable, match="does not answer"):
        docker_backend.docker_client()


def test_missing_tools_py_is_a_bundle_error(tmp_path: Path, backend: str) -> None:
    (tmp_path / "empty").mkdir()
    with open_sandbox(tmp_path / "empty", backend) as sandbox:
        with pytest.raises(BundleError, match="tools.py is missing"):
            sandbox.describe_tools()


@pytest.mark.usefixtures("unforked")  # reads the bwrap launch's process
def test_dropped_sandbox_leaves_no_worker(
    bundle: Path, tmp_path: Path, require_backend: Callable[[str], None]
) -> None:
    import gc

    require_backend("bwrap")
    sandbox = open_sandbox(bundle, "bwrap")
    sandbox.reset(fresh_state(bundle, tmp_path / "e"))
    assert sandbox.call_tool("counter", {}).ok
    proc = sandbox._conn.handle.proc  # type: ignore[attr-defined]
    del sandbox
    gc.collect()
    assert proc.poll() is not None


def test_sandbox_started_from_a_thread_survives_the_thread(
    bundle: Path, tmp_path: Path, require_backend: Callable[[str], None]
) -> None:
    import threading

    require_backend("bwrap")  # --die-with-parent follows the thread that forked bwrap
    with open_sandbox(bundle, "bwrap") as sandbox:
        worker = threading.Thread(target=sandbox.reset, args=(fresh_state(bundle, tmp_path / "e"),))
        worker.start()
        worker.join()
        assert sandbox.call_tool("bump", {}).value == 1
        time.sleep(0.2)
        assert sandbox.call_tool("bump", {}).value == 2
