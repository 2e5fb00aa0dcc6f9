"""``envgym-tool``: a bundle's tools as a command line, inside an exported Harbor task's container.

This file is shipped verbatim into every exported general-agent task (``/envgym/bin/
envgym-tool``) beside a copy of the stdlib-only envgym modules the sandbox worker uses
(``runtime``, ``tool_schema``, ``verdict``, ``sandbox/base``, ``sandbox/runner``), so tools,
gold solutions and verifiers run through the same `BundleRunner` ops as in an envgym sandbox::

    envgym-tool list                      the tools, as JSON function schemas
    envgym-tool call NAME '{"k": "v"}'    call a tool (arguments: one JSON object; "-": stdin)
    envgym-tool answer TEXT               tasks without a submit tool: the final answer
    envgym-tool _solve SOLUTION TASK      the gold solution (solution/solve.sh)
    envgym-tool _verify VERIFIER TASK OUT the verifier (tests/test.sh): exit 0 passed, 1 failed

The episode state is the working directory's files (``$ENVGYM_STATE``, default ``/app``); tool
calls change it on disk, so it carries over from call to call and to the verifier.  A successful
call of the task's submit tool records its arguments as the submission
(``$ENVGYM_HOME/run/submission.json``) and ends the task: later calls are refused, as an envgym
episode ends at its submission.  Stdlib only; runs on the container's Python 3.11+.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HOME = Path(os.environ.get("ENVGYM_HOME", "/envgym"))
STATE = Path(os.environ.get("ENVGYM_STATE", "/app"))
sys.path.insert(0, str(HOME / "lib"))

from envgym.sandbox.runner import BundleRunner  # noqa: E402 - after the lib path is known
from envgym.verdict import Verdict  # noqa: E402

_MAX_OUTPUT = 1024 * 1024  # a tool's printed output kept per call (the sandbox's default order)
_MAX_ARGS = 8 * 1024 * 1024


USAGE = """envgym-tool: this task's tools.

  envgym-tool list                      every tool: name, description, JSON parameters
  envgym-tool call NAME '{"k": "v"}'    call a tool (arguments: one JSON object; "-": stdin)
  envgym-tool answer TEXT               tasks without a submit tool: the final answer"""


class UsageError(Exception):
    """A command line this tool cannot run; exit 2 with the message."""


def _task() -> dict[str, Any]:
    return json.loads((HOME / "task.json").read_text(encoding="utf-8"))


def _submission_path() -> Path:
    return HOME / "run" / "submission.json"


def _runner(extra: Path | None = None) -> BundleRunner:
    """A runner over the bundle's tools (plus one solution or verifier file), state activated.

    The code is staged into a fresh directory: the runner reads a bundle's code files from one
    folder, and the solution and verifier live apart (solution/, tests/) so the agent never
    sees them.
    """
    stage = Path(tempfile.mkdtemp(prefix="envgym-stage-"))
    atexit.register(shutil.rmtree, stage, True)  # one process per command: gone when it ends
    for name in ("tools.py", "tools.json"):
        if (HOME / "bundle" / name).is_file():
            shutil.copyfile(HOME / "bundle" / name, stage / name)
    if extra is not None:
        shutil.copyfile(extra, stage / extra.name)
    runner = BundleRunner(stage, module_prefix="envgym_bundle_", max_stdout_bytes=_MAX_OUTPUT)
    loaded = runner.load({})
    if not loaded.get("ok"):
        raise UsageError(f"the bundle's code does not load: {loaded.get('message')}")
    runner.reset({"state_dir": str(STATE)})
    os.chdir(STATE)  # the sandbox worker's working directory is the episode state too
    return runner


def _write_submission(submission: dict[str, Any]) -> None:
    path = _submission_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(submission, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)


def _refuse_after_submission() -> None:
    if _submission_path().exists():
        raise UsageError("the task is over: the submission was recorded; no more calls")


def _arguments(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    if text == "-":
        text = sys.stdin.read(_MAX_ARGS + 1)
    if len(text) > _MAX_ARGS:
        raise UsageError(f"the arguments are over {_MAX_ARGS} bytes")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"the arguments are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError('the arguments must be one JSON object, e.g. \'{"key": "value"}\'')
    return value


def _check_arguments(runner: BundleRunner, name: str, arguments: dict[str, Any]) -> None:
    """Unknown and missing parameters, named (the host's JSON Schema check, in its simplest
    part: the container has no jsonschema; a value of the wrong type is the tool's to refuse)."""
    specs = {t["name"]: t for t in runner.load({})["value"]["tools"]}
    if name not in specs:
        raise UsageError(f"no tool named {name!r}; `envgym-tool list` shows them")
    schema = specs[name]["parameters"]
    known = schema.get("properties", {})
    unknown = (
        sorted(set(arguments) - set(known)) if schema.get("additionalProperties") is False else []
    )
    if unknown:
        raise UsageError(f"{name} has no parameter {unknown[0]!r} (it takes: {', '.join(known)})")
    missing = [k for k in schema.get("required", []) if k not in arguments]
    if missing:
        raise UsageError(f"{name} needs the parameter {missing[0]!r}")


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)


def cmd_list() -> int:
    runner = _runner()
    tools = runner.load({})["value"]["tools"]
    print(json.dumps(tools, ensure_ascii=False, indent=1))
    return 0


def cmd_call(name: str, text: str | None) -> int:
    _refuse_after_submission()
    arguments = _arguments(text)
    runner = _runner()
    _check_arguments(runner, name, arguments)
    reply = runner.call({"name": name, "arguments": arguments})
    if reply.get("stdout"):
        sys.stderr.write(reply["stdout"] + "\n")
    if not reply.get("ok"):
        sys.stderr.write(f"error ({reply.get('error')}): {reply.get('message')}\n")
        return 1
    print(_show(reply.get("value")))
    if name == _task().get("submit_tool"):
        _write_submission(arguments)
        print("(submitted: the task is over)")
    return 0


def cmd_answer(text: str) -> int:
    if _task().get("submit_tool") is not None:
        raise UsageError(f"this task is submitted with its tool {_task()['submit_tool']!r}")
    _refuse_after_submission()
    _write_submission({"content": text})
    print("(answer recorded: the task is over)")
    return 0


def cmd_solve(solution: Path, task_file: Path) -> int:
    task = json.loads(task_file.read_text(encoding="utf-8"))
    runner = _runner(solution)
    reply = runner.solve(
        {"function": task["solution"], "task": task, "submit_tool": task.get("submit_tool")}
    )
    if not reply.get("ok") or reply.get("submission") is None:
        sys.stderr.write(f"the gold solution failed: {reply.get('message', 'no submission')}\n")
        return 1
    _write_submission(reply["submission"])
    print(f"gold solution: {len(reply.get('calls') or [])} tool calls, submitted")
    return 0


def cmd_verify(verifier: Path, task_file: Path, out: Path) -> int:
    task = json.loads(task_file.read_text(encoding="utf-8"))
    path = _submission_path()
    if not path.is_file():  # as an envgym episode cut before any submission: nothing verified
        verdict = Verdict.failure("submitted", "no submission was made")
    else:
        try:
            submission = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            submission = None
            verdict = Verdict.failure("submitted", f"the submission is unreadable: {exc}")
        if isinstance(submission, dict):
            runner = _runner(verifier)
            reply = runner.verify(
                {"function": task["verifier"], "submission": submission, "task": task}
            )
            verdict = (
                Verdict.from_report(reply["value"])
                if reply.get("ok")
                else Verdict.broken("verifier", str(reply.get("message")))
            )
        elif submission is not None:
            verdict = Verdict.failure("submitted", "the submission is not a JSON object")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(verdict.to_dict(), ensure_ascii=False, indent=1), encoding="utf-8")
    return 0 if verdict.passed else 1


def main(argv: list[str]) -> int:
    try:
        if not argv or argv[0] in ("-h", "--help", "help"):
            print(USAGE)
            return 0
        command, rest = argv[0], argv[1:]
        if command == "list" and not rest:
            return cmd_list()
        if command == "call" and len(rest) in (1, 2):
            return cmd_call(rest[0], rest[1] if len(rest) == 2 else None)
        if command == "answer" and len(rest) == 1:
            return cmd_answer(rest[0])
        if command == "_solve" and len(rest) == 2:
            return cmd_solve(Path(rest[0]), Path(rest[1]))
        if command == "_verify" and len(rest) == 3:
            return cmd_verify(Path(rest[0]), Path(rest[1]), Path(rest[2]))
        raise UsageError(f"unknown command {' '.join(argv)[:200]!r}; see envgym-tool --help")
    except UsageError as exc:
        sys.stderr.write(f"envgym-tool: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
