"""The host's look at a bundle's code files: parsed with ``ast``, never imported or executed.

``tools.py``, ``solution.py`` and ``verifier.py`` arrive already read within their size limit
(``BundleLimits.code_bytes``); what ``ast.parse`` refuses — syntax, non-UTF-8 text, expressions
nested deeper than its recursion guards allow — becomes a :class:`BundleError` naming the file.
"""

from __future__ import annotations

import ast
import gc
import threading

from envgym.bundle_limits import BundleError

_AST_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<bundle>") -> ast.Module:
    """``ast.parse`` that is safe while other threads parse too.

    CPython 3.11.7 keeps the counter that ``ast.parse`` uses while it converts its C tree into
    Python objects in interpreter-wide state.  A garbage collection during that conversion can
    run finalizers (``__del__``, weakref callbacks), i.e. bytecode, so the GIL may pass to
    another thread; if that thread parses too, both share the counter and one of them fails with
    ``SystemError: AST constructor recursion depth mismatch``.  A lock alone serializes only the
    parses that take it (in-process tools, verifiers and synthesis code parse on their own), so
    the collector is also paused for the parse: no finalizer runs, nothing hands the GIL over,
    and this parse cannot be interleaved with any other.
    """
    with _AST_LOCK:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return ast.parse(source, filename=filename)
        finally:
            if enabled:
                gc.enable()


def defined_functions(data: bytes, file: str) -> dict[str, ast.FunctionDef]:
    """Top-level functions of a bundle module (``data``, already read within its size limit),
    parsed, never executed, on the host; tools must type every parameter."""
    try:
        source = data.decode()
        tree = parse_python(source, filename=file)
    except SyntaxError as exc:
        raise BundleError(file, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise BundleError(file, f"not UTF-8 text: {exc}") from None
    except (RecursionError, MemoryError):
        # ast.parse raises these on deeply nested expressions (`-` * 100_000 + `1`, a 200k-term
        # sum): the parser's and the tree converter's recursion guards, not a real exhaustion.
        raise BundleError(file, "an expression nests too deeply for Python's parser") from None
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if file == "tools.py":
        for name, node in funcs.items():
            if name.startswith("_"):
                continue
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if arg.annotation is None:
                    raise BundleError(
                        file,
                        f"tool {name!r} (line {node.lineno}): parameter {arg.arg!r} has no type hint",
                        field=name,
                    )
            if args.vararg or args.kwarg:
                raise BundleError(
                    file,
                    f"tool {name!r}: *args/**kwargs cannot be described to a model",
                    field=name,
                )
    return funcs
