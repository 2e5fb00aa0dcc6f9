"""Tools of a code-interpreter bundle: ``python`` and ``submit_answer``.

In an episode, envgym routes ``python`` to a real Jupyter kernel in its own jail
(envgym/tools/python_kernel, docs/CODE_INTERPRETER.md).  The body below only runs where the bundle
contract runs tools — inside the bundle sandbox, e.g. when ``envgym check`` replays a gold
solution: a standard-library stand-in that executes the code in a fresh namespace in the
episode's working directory and returns what it printed, plus the value of a final expression.
"""

from __future__ import annotations

import ast
import contextlib
import io
import traceback


def python(code: str) -> str:
    """Execute Python code in a stateful Jupyter notebook and return its output.

    The output is what the code prints (stdout and stderr), the value of the last expression,
    and a short traceback if it raises. Variables and imports persist across calls within the
    task. Files for the task are in the current working directory. An execution times out
    after 120 seconds. numpy, pandas, sympy and the standard library are available; there is
    no network.

    Args:
        code: the Python source to execute.
    """
    tree = ast.parse(code, mode="exec")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    namespace: dict = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            exec(compile(tree, "<cell>", "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
                if value is not None:
                    print(repr(value))
        except Exception as exc:  # the notebook shows the error; it is not a tool failure
            frames = traceback.extract_tb(exc.__traceback__)[-3:]
            print("".join(traceback.format_list(frames)) + f"{type(exc).__name__}: {exc}")
    return out.getvalue() or "(no output)"


def submit_answer(answer: str) -> str:
    """Submit the final answer to the task. Call it once, when you are sure.

    Args:
        answer: only the final answer, in the format the task asks for, e.g. 42, 3/4,
            -896*x**4 + 3584*x, [[0, 1], [1, 0]] or a word.
    """
    if not answer.strip():
        raise ValueError("the answer is empty: pass the final answer as `answer`")
    return "Answer submitted."
