"""A bundle's code compiled once per sandbox, on the host, for every worker of it.

Every episode gets a fresh worker (a worker serves one episode and is discarded), and each used
to compile ``tools.py`` and ``verifier.py`` from source: 47M of a forked worker's 76M user-space
instructions for trip planning (docs/SANDBOX.md, "What it costs now").  So the host compiles the
staged copies once, when the sandbox stages them, and writes the marshalled code objects beside
them (``BYTECODE_DIR``); each worker unmarshals them instead (sandbox/runner.py).

Why the host may compile what it must never run: it already parses these files with ``ast``
(envgym/bundle_code.py), and compiling adds only code generation — it executes nothing.  The
file is parsed first with the same guard (deep nesting is refused there), and the compile
cannot recurse past that: at the deepest nesting ``ast.parse`` accepts (~3,000 levels for
unary, attribute, subscript, call, lambda, power and conditional chains) ``compile`` still
returns (CPython 3.11, tests/test_sandbox_bytecode.py); marshal refuses code objects nested
past 2,000 levels (nested lambdas) with a ValueError.  A file the host cannot compile or
marshal gets no bytecode: the worker compiles it and reports any error exactly as before.  The code is compiled with the
worker's file names (its in-jail paths, for tracebacks and line numbers) and ``optimize=0``
(the worker runs without ``-O``); a bundle cannot supply bytecode of its own, as the stage holds
only the files the host copies into it.  Only the bwrap backends use it: their workers run the
host's interpreter; a Docker image's Python may read another marshal format.
"""

from __future__ import annotations

import marshal
import os
from pathlib import Path

from envgym.bundle_code import parse_python
from envgym.runtime import BYTECODE_DIR, CODE_FILES


def compile_stage(stage: Path, jail_dir: str) -> tuple[str, ...]:
    """Compile each code file of ``stage`` as a worker seeing it at ``jail_dir`` would, into
    ``stage/BYTECODE_DIR``; returns the names compiled."""
    out = stage / BYTECODE_DIR
    out.mkdir(mode=0o755)
    done = []
    for name in CODE_FILES:
        source = stage / name
        if not source.is_file():
            continue
        data = source.read_bytes()
        try:
            parse_python(data.decode(), name)
            code = compile(data, f"{jail_dir}/{name}", "exec", dont_inherit=True, optimize=0)
            # ValueError also from marshal: code objects nested past its depth limit
            blob = marshal.dumps(code)
        except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError):
            continue  # the worker compiles it and reports why it cannot
        target = out / name
        target.write_bytes(blob)
        os.chmod(target, 0o644)
        done.append(name)
    os.chmod(out, 0o755)
    return tuple(done)
