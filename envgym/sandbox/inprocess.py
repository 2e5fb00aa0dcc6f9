"""Trusted backend: bundle code runs in the host interpreter.

NO ISOLATION.  Bundle code can read and write anything the host can, hang the host, exit it.
Use it only for built-in, reviewed bundles and for benchmarks that measure the environment
rather than the sandbox.  What it does keep from the sandboxed backends:

* the same replies (runner.py is shared with the worker): exceptions, non-JSON values,
  oversized results and MemoryError become :class:`CallOutcome` errors, never raise;
* separation between environments: each instance imports the bundle's modules under unique
  names, and sets ``envgym.runtime``'s state ContextVar around each call only.

Not enforced: wall-clock timeouts, memory/CPU/process limits.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

from envgym import runtime
from envgym.sandbox.base import CallError, CallOutcome, Limits, Sandbox, SolveOutcome, ToolSpec
from envgym.sandbox.runner import BundleRunner, RunnerReply, encode_reply

_instances = itertools.count()

#: The JSON text of a call's value, as ``json.dumps(value, ensure_ascii=False, allow_nan=False)``
#: writes it; built once (``json.dumps`` with options builds a new encoder on every call).
_to_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode


def _render(value: Any) -> str:
    """The text an agent sees for a value: strings as they are, ints as JSON writes them (no
    encoder needed), anything else through the JSON encoder (which also refuses non-JSON)."""
    if isinstance(value, str):
        return value
    if type(value) is int:
        return int.__repr__(value)  # json's own rendering of an int (a bool is not this type)
    return _to_json(value)


class InProcessSandbox(Sandbox):
    backend = "inprocess"

    def __init__(self, bundle_dir: Path, limits: Limits | None = None) -> None:
        super().__init__(bundle_dir, limits)
        self._prefix = f"envgym_bundle_{next(_instances)}_"
        self._runner = BundleRunner(
            self.bundle_dir,
            module_prefix=self._prefix,
            max_stdout_bytes=self.limits.max_stdout_bytes,
        )
        self._load: RunnerReply | None = None

    def describe_tools(self) -> list[ToolSpec]:
        from envgym.bundle import BundleError

        load = self._loaded()
        if not load.get("ok"):
            raise BundleError(load.get("file") or "tools.py", load.get("message", ""))
        return [ToolSpec(**spec) for spec in load["value"]["tools"]]

    def reset(self, state_dir: Path) -> None:
        state = Path(state_dir).resolve()
        if not state.is_dir():
            raise FileNotFoundError(f"episode state directory {state} does not exist")
        self._runner.handle({"op": "reset", "state_dir": str(state)})

    def call_tool(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> CallOutcome:
        # timeout_s: no wall-clock limit is enforced in-process (see the module docstring).
        load = self._load
        if load is not None and load.get("ok"):
            # The per-step hot path: straight to the runner's call op (no request dict, no op
            # table); the replies are the same as through ``handle``.
            start = time.perf_counter()
            reply = self._runner.call_tool(name, arguments)
            if reply.get("ok"):
                return self._call_outcome(reply, start)
            return self._through_json(reply, start)[0]
        return self._outcome({"op": "call", "name": name, "arguments": arguments})[0]

    def solve(self, function: str, task: dict[str, Any], submit_tool: str | None) -> SolveOutcome:
        request = {"op": "solve", "function": function, "task": task, "submit_tool": submit_tool}
        outcome, reply = self._outcome(request)
        calls = [(str(name), dict(args)) for name, args in reply.get("calls") or []]
        return SolveOutcome(outcome=outcome, calls=calls, submission=reply.get("submission"))

    def verify(
        self, function: str, submission: dict[str, Any], task: dict[str, Any]
    ) -> CallOutcome:
        request = {"op": "verify", "function": function, "submission": submission, "task": task}
        return self._outcome(request)[0]

    def close(self) -> None:
        if self._runner.state is not None:
            runtime.close_connections(self._runner.state)
            self._runner.state = None
        # list() copies the keys in one step under the GIL: envs of other threads import while
        # this one closes, and iterating sys.modules itself then raised "dictionary changed size".
        for name in [n for n in list(sys.modules) if n.startswith(self._prefix)]:
            sys.modules.pop(name, None)

    def _loaded(self) -> RunnerReply:
        if self._load is None:
            self._load = self._runner.handle({"op": "load"})
        return self._load

    def _outcome(self, request: dict[str, Any]) -> tuple[CallOutcome, RunnerReply]:
        start = time.perf_counter()
        load = self._loaded()
        if not load.get("ok"):
            return CallOutcome(
                ok=False, error=CallError.EXCEPTION, message=load.get("message", "")
            ), {}
        reply = self._runner.handle(request)
        if reply.get("ok") and request["op"] == "call":
            # Hot path: serialize the value once (which is also the JSON check the worker
            # makes); the env reuses the text.  Trusted code, so the live value is handed over.
            return self._call_outcome(reply, start), reply
        return self._through_json(reply, start)

    def _through_json(self, reply: RunnerReply, start: float) -> tuple[CallOutcome, RunnerReply]:
        """The outcome of any reply but a successful call's (those: ``_call_outcome``)."""
        # Round-trip through JSON like the worker does: same errors for non-JSON values and
        # oversized results, and the caller gets a copy rather than live bundle objects.
        reply = json.loads(encode_reply(reply, self.limits.max_reply_bytes))
        duration = time.perf_counter() - start
        if reply.get("ok"):
            value = reply.get("value")
            return CallOutcome(
                ok=True, value=value, stdout=reply.get("stdout", ""), duration_s=duration
            ), reply
        outcome = CallOutcome(
            ok=False,
            error=CallError(reply["error"]),
            message=reply.get("message", ""),
            stdout=reply.get("stdout", ""),
            duration_s=duration,
        )
        return outcome, reply

    def _call_outcome(self, reply: RunnerReply, start: float) -> CallOutcome:
        value = reply["value"]
        stdout = reply.get("stdout", "")
        try:
            text = _render(value)
        except (TypeError, ValueError, RecursionError) as exc:
            message = f"the return value is not JSON-compatible: {exc}"
            return CallOutcome(ok=False, error=CallError.EXCEPTION, message=message, stdout=stdout)
        if len(text) > self.limits.max_reply_bytes:  # characters ≤ bytes: a cheap first test
            size = len(text.encode())
            if size > self.limits.max_reply_bytes:
                message = (
                    f"the result is {size} bytes of JSON, over the limit of {self.limits.max_reply_bytes} "
                    "bytes; ask for less (filter, paginate)"
                )
                return CallOutcome(
                    ok=False, error=CallError.OUTPUT_TOO_LARGE, message=message, stdout=stdout
                )
        duration = time.perf_counter() - start
        return CallOutcome(ok=True, value=value, stdout=stdout, duration_s=duration, rendered=text)
