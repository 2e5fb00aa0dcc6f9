"""The grader's launcher of the hidden tests: runs *inside* the jail, before any agent code.

Usage (grade.py builds it): ``python -I -X utf8 trace_boot.py OUT_DIR WATCHED_JSON [pytest args]``.

The agent's source modules are imported by the tests, so they run in the test process and can
rewrite pytest (skip test bodies, force outcomes, rewrite the JUnit file).  What pytest reports
is therefore only a claim; this launcher records the evidence, from hooks installed before
anything of the agent's can run (``-I``: neither the script's folder, ``/repo`` nor
``PYTHONPATH`` is on ``sys.path`` yet, and only the read-only venv's site runs):

* a ``sys.setprofile`` profiler that, for code objects of the watched test files only, counts
  *normal* returns (the frame's last instruction is a return opcode: an exception unwinding the
  frame, a ``yield`` or an ``await`` does not count).  A test whose body was skipped or raised
  never adds one, so a "passed" in the JUnit report without a matching return is a forgery;
* an audit hook (``sys.addaudithook``: it cannot be removed) that notes the ways agent code could
  reach the profiler or fake a test's code: replacing the profiler, walking the garbage
  collector, other threads' frames, building a code object, swapping a ``__code__`` or compiling
  other source under a watched file's name; ``sys.getprofile`` is replaced by a stub that notes
  the call (a per-frame ``f_trace`` would have exposed a tracer: a profiler has none);
* at exit, a JSON report with an HMAC under a key the host wrote to ``OUT_DIR/key`` — read and
  deleted here before any agent code runs — into ``OUT_DIR/trace.json``.

All the state lives in closures of :func:`_install`, which returns before pytest starts: no
frame of a test's stack and no module global holds it.  This is
defence in depth, not isolation: code in the same interpreter that targets this launcher
specifically can still reach a closure (docs/SWE.md says what is and is not guaranteed).
"""

from __future__ import annotations

import sys


def _install(out_dir: str, watched_json: str) -> None:
    """Read the key, install the profiler, the audit hook and the report writer.  Returns before
    pytest starts, so no frame on the stack of a test holds this state."""
    import atexit
    import dis
    import hashlib
    import hmac
    import json
    import os

    key_fd = os.open(os.path.join(out_dir, "key"), os.O_RDONLY | os.O_NOFOLLOW)
    key = bytes.fromhex(os.read(key_fd, 256).decode("ascii").strip())
    os.close(key_fd)
    os.unlink(os.path.join(out_dir, "key"))
    genuine = {
        p: h for p, h in json.loads(watched_json).items() if type(p) is str and type(h) is str
    }
    watched = frozenset(genuine)
    return_ops = frozenset(dis.opmap[n] for n in ("RETURN_VALUE", "RETURN_CONST") if n in dis.opmap)
    returns: dict[tuple[str, int, str], int] = {}
    compiled: dict[str, int] = {}
    flags: list[str] = []
    code_type = type(_install.__code__)

    def profiler(frame, event, arg):
        if event == "return":
            code = frame.f_code
            name = code.co_filename
            # exact str: no agent __eq__/__hash__ ever runs in here
            if (
                type(name) is str
                and name in watched
                and 0 <= frame.f_lasti < len(code.co_code)
                and code.co_code[frame.f_lasti] in return_ops
            ):
                key_ = (name, code.co_firstlineno, code.co_qualname)
                returns[key_] = returns.get(key_, 0) + 1

    flagged_events = {"sys.setprofile": "the profiler was replaced (sys.setprofile)",
                      "gc.get_referrers": "gc.get_referrers", "gc.get_referents": "gc.get_referents",
                      "gc.get_objects": "gc.get_objects", "sys._current_frames": "sys._current_frames"}  # fmt: skip

    def watched_code(value: object) -> bool:
        return (
            type(value) is code_type
            and type(value.co_filename) is str
            and value.co_filename in watched
        )

    def audit(event: str, args: tuple) -> None:
        if event in flagged_events:
            flags.append(flagged_events[event])
        elif event == "compile" and len(args) == 2 and type(args[1]) is str and args[1] in watched:
            source = args[0]
            if type(source) in (str, bytes):  # pytest's ast.parse of the file, or a plain import
                data = source.encode() if type(source) is str else source
                if hashlib.sha256(data).hexdigest() != genuine[args[1]]:
                    flags.append(f"other source was compiled as {args[1]}")
            else:  # the rewritten tree pytest compiles once per test module
                compiled[args[1]] = compiled.get(args[1], 0) + 1
                if compiled[args[1]] > 1:
                    flags.append(f"{args[1]} was compiled twice")
        elif (
            event == "code.__new__"
            and len(args) > 1
            and type(args[1]) is str
            and args[1] in watched
        ):
            flags.append(f"a code object was built for {args[1]}")
        elif event == "object.__setattr__" and len(args) == 3 and args[1] == "__code__":
            old = (
                getattr(args[0], "__code__", None) if type(args[0]).__name__ == "function" else None
            )
            if watched_code(old) or watched_code(args[2]):
                flags.append("a watched function's __code__ was replaced")

    def write_report() -> None:
        body = json.dumps({"returns": [[f, line, q, n] for (f, line, q), n in sorted(returns.items())],
                           "flags": sorted(set(flags))}, sort_keys=True).encode()  # fmt: skip
        mac = hmac.new(key, body, "sha256").hexdigest()
        path = os.path.join(out_dir, "trace.json")
        try:
            os.unlink(path)  # whatever a test put there; O_EXCL below refuses a race
        except OSError:
            pass
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except OSError:
            return  # no report: the host counts the run as rigged
        with os.fdopen(fd, "wb") as out:
            out.write(json.dumps({"mac": mac}).encode() + b"\n" + body)

    sys.setprofile(profiler)
    # The profiler is reachable from Python only through sys.getprofile (not audited): hide it.
    sys.getprofile = lambda: flags.append("sys.getprofile") or None  # type: ignore[assignment]
    sys.addaudithook(audit)
    atexit.register(write_report)


def _run(pytest_args: list[str]) -> int:
    import os

    import pytest  # from the read-only venv, before the repository is on sys.path

    # What `python -m pytest` with the recipe's PYTHONPATH would have: the repo, then PYTHONPATH.
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[0:0] = [os.getcwd(), *extra]
    sys.dont_write_bytecode = True
    import importlib.util

    # Tests must run in this process, where the profiler is: a project's `-n auto` (xdist) would
    # send them to workers the trace cannot see (the command line outranks addopts).
    in_process = ["-n", "0"] if importlib.util.find_spec("xdist") is not None else []
    sys.argv = ["pytest", *in_process, *pytest_args]
    return int(pytest.console_main())


if __name__ == "__main__":
    _install(sys.argv[1], sys.argv[2])
    raise SystemExit(_run(sys.argv[3:]))
