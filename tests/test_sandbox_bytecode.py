"""A bundle's code compiled once per sandbox on the host (envgym/sandbox/bytecode.py), loaded by
every bwrap worker, forked or not: the workers run what the host compiled; a bundle cannot
supply bytecode of its own; what the host cannot compile the worker compiles and reports as
before; a damaged file falls back to the source; errors keep their file and line."""

from __future__ import annotations

import marshal
from collections.abc import Callable
from pathlib import Path

import pytest

from envgym.bundle import BundleError
from envgym.bundle_code import parse_python
from envgym.runtime import BYTECODE_DIR
from envgym.sandbox import CallError
from envgym.sandbox.bwrap import BwrapSandbox
from envgym.sandbox.bytecode import compile_stage

pytestmark = pytest.mark.timeout(120)
TOOLS = '''
def shout(text: str) -> str:
    """Say it louder.

    Args:
        text: what to say.
    """
    return text.upper()


def fail() -> str:
    """Always fails."""
    x = 1
    raise RuntimeError(f"failed at {x}")
'''
PLANTED = TOOLS.replace("return text.upper()", 'return "planted"')


@pytest.fixture(params=[False, True], ids=["bwrap-started", "forked"])
def sandbox_of(
    request: pytest.FixtureRequest, require_backend: Callable[[str], None]
) -> Callable[[Path], BwrapSandbox]:
    require_backend("bwrap")
    made: list[BwrapSandbox] = []

    def make(root: Path) -> BwrapSandbox:
        made.append(BwrapSandbox(root, fork=request.param))
        return made[-1]

    yield make  # type: ignore[misc]
    for sandbox in made:
        sandbox.close()


def test_workers_run_the_code_the_host_compiled(
    make_bundle: Callable[..., Path], sandbox_of: Callable[[Path], BwrapSandbox]
) -> None:
    sandbox = sandbox_of(make_bundle(TOOLS))
    assert sandbox.bytecode == ("tools.py", "solution.py", "verifier.py")
    staged = sandbox.stage / BYTECODE_DIR / "tools.py"
    assert staged.stat().st_mode & 0o777 == 0o644
    # what the worker loads is that file: replaced before any worker starts, it decides
    staged.write_bytes(marshal.dumps(compile(PLANTED, "/bundle/tools.py", "exec")))
    assert sandbox.call_tool("shout", {"text": "hi"}).value == "planted"


def test_a_bundle_cannot_supply_bytecode(
    make_bundle: Callable[..., Path], sandbox_of: Callable[[Path], BwrapSandbox]
) -> None:
    root = make_bundle(TOOLS)
    (root / BYTECODE_DIR).mkdir()
    (root / BYTECODE_DIR / "tools.py").write_bytes(marshal.dumps(compile(PLANTED, "x", "exec")))
    sandbox = sandbox_of(root)
    assert sandbox.call_tool("shout", {"text": "hi"}).value == "HI"


def test_errors_keep_their_file_and_line(
    make_bundle: Callable[..., Path], sandbox_of: Callable[[Path], BwrapSandbox]
) -> None:
    sandbox = sandbox_of(make_bundle(TOOLS))
    outcome = sandbox.call_tool("fail", {})
    line = TOOLS.splitlines().index('    raise RuntimeError(f"failed at {x}")') + 1
    assert outcome.error is CallError.EXCEPTION and "failed at 1" in outcome.message
    assert f"tools.py, line {line}" in outcome.message or f"line {line}" in outcome.message


def test_what_the_host_cannot_compile_the_worker_reports(
    make_bundle: Callable[..., Path], sandbox_of: Callable[[Path], BwrapSandbox]
) -> None:
    sandbox = sandbox_of(make_bundle(TOOLS + "\ndef broken(:\n"))
    assert "tools.py" not in sandbox.bytecode
    with pytest.raises(BundleError, match=r"tools.py line \d+: SyntaxError"):
        sandbox.describe_tools()


def test_a_damaged_bytecode_file_falls_back_to_the_source(
    make_bundle: Callable[..., Path], sandbox_of: Callable[[Path], BwrapSandbox]
) -> None:
    sandbox = sandbox_of(make_bundle(TOOLS))
    staged = sandbox.stage / BYTECODE_DIR / "tools.py"
    staged.write_bytes(staged.read_bytes()[:20])
    assert sandbox.call_tool("shout", {"text": "hi"}).value == "HI"


NESTINGS: dict[str, Callable[[int], str]] = {
    "unary": lambda n: "x = " + "-" * n + "1\n",
    "attribute": lambda n: "x = y" + ".a" * n + "\n",
    "subscript": lambda n: "x = y" + "[0]" * n + "\n",
    "call": lambda n: "x = f" + "()" * n + "\n",
    "lambda": lambda n: "x = " + "lambda: " * n + "1\n",
    "power": lambda n: "x = " + "**".join(["2"] * n) + "\n",
    "conditional": lambda n: "x = " + "1 if a else " * n + "1\n",
}


def _deepest_parse(make: Callable[[int], str]) -> int:
    """The deepest nesting ``ast.parse`` accepts here (it refuses deeper with an exception)."""
    lo, hi = 1, 20_000
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            parse_python(make(mid))
            lo = mid
        except (RecursionError, MemoryError, SyntaxError):
            hi = mid
    return lo


@pytest.mark.parametrize("kind", NESTINGS)
def test_the_host_compiles_at_the_parse_limit_and_refuses_past_it(
    tmp_path: Path, kind: str
) -> None:
    make = NESTINGS[kind]
    limit = _deepest_parse(make)
    assert limit > 500
    # nested lambdas are nested code objects, which marshal refuses past 2,000 levels: then the
    # host writes nothing and the worker compiles the file itself
    at_limit = kind != "lambda"
    for depth, compiled in ((limit, at_limit), (limit + 1, False), (100_000, False)):
        stage = tmp_path / f"stage{depth}"
        stage.mkdir()
        (stage / "tools.py").write_text(make(depth))
        assert compile_stage(stage, "/bundle") == (("tools.py",) if compiled else ()), depth


@pytest.mark.parametrize("source", [b"def f(:\n", b"\xff = 1\n"], ids=["syntax", "not-utf8"])
def test_a_file_the_host_cannot_compile_gets_no_bytecode(tmp_path: Path, source: bytes) -> None:
    (tmp_path / "tools.py").write_bytes(source)
    assert compile_stage(tmp_path, "/bundle") == ()
