"""The protocol ops on bundle code: load, reset, call, solve, verify.

Shared by the sandbox worker (inside bwrap/Docker) and the trusted ``inprocess`` backend, so
both produce the same replies.  Stdlib + envgym.runtime + envgym.tool_schema only.

A reply is a plain dict: ``{"ok": true, "value": ...}`` or
``{"ok": false, "error": <CallError value>, "message": "..."}``, plus ``"stdout"`` when the
call printed, ``"file"`` on load errors and ``"calls"``/``"submission"`` for ``solve``.
"""

from __future__ import annotations

import enum
import inspect
import json
import linecache
import marshal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envgym import runtime
from envgym.runtime import CODE_FILES
from envgym.tool_schema import ToolSchemaError, argument_coercer, function_schema, public_tools

_MAX_MESSAGE = 4000
_MAX_FRAMES = 6

RunnerReply = dict[str, Any]


class TextCapture:
    """A capped text sink standing in for ``sys.stdout``/``sys.stderr`` during a call."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._parts: list[str] = []
        self._size = 0
        self._dropped = 0

    def write(self, text: str) -> int:
        text = str(text)
        room = self.cap - self._size
        if room > 0:
            self._parts.append(text[:room])
            self._size += min(len(text), room)
        self._dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return 1

    @property
    def used(self) -> bool:
        return bool(self._parts or self._dropped)

    def take(self) -> str:
        text = "".join(self._parts)
        if self._dropped:
            text += f"\n[... {self._dropped} more characters of output dropped]"
        self._parts, self._size, self._dropped = [], 0, 0
        return text


_local = threading.local()  # .capture: the TextCapture of the call running on this thread


class _Router:
    """``sys.stdout``/``sys.stderr`` routing each write to the calling thread's capture.

    In-process, many envs call tools from many threads at once (the rollout engine's env
    threads): swapping ``sys.stdout`` per call raced (a thread restored another call's
    capture), which left the host's own stdout captured for good.  Writes from a thread with
    no call running go to the stream that was there before.
    """

    def __init__(self, original: Any) -> None:
        self.original = original

    def write(self, text: str) -> int:
        return (getattr(_local, "capture", None) or self.original).write(text)

    def flush(self) -> None:
        target = getattr(_local, "capture", None) or self.original
        target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(getattr(_local, "capture", None) or self.original, name)


def _route() -> None:
    """Install the routers (again, if someone replaced ``sys.stdout`` since)."""
    if type(sys.stdout) is not _Router:
        sys.stdout = _Router(sys.stdout)
    if type(sys.stderr) is not _Router:
        sys.stderr = _Router(sys.stderr)


def error(kind: str, message: str, **extra: Any) -> RunnerReply:
    return {"ok": False, "error": kind, "message": message[:_MAX_MESSAGE], **extra}


_encode = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


def encode_reply(reply: RunnerReply, max_bytes: int) -> bytes:
    """One protocol line; non-JSON values and oversized replies become error replies."""
    try:
        data = _encode(reply).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        what = "the return value" if reply.get("ok") else "the reply"
        slim = error(
            "exception", f"{what} is not JSON-compatible: {exc}", stdout=reply.get("stdout", "")
        )
        slim["id"] = reply.get("id")
        data = json.dumps(slim, separators=(",", ":")).encode()
    if len(data) > max_bytes:
        slim = error(
            "output_too_large",
            f"the result is {len(data)} bytes of JSON, over the limit of {max_bytes} bytes; "
            "ask for less (filter, paginate)",
        )
        slim["id"] = reply.get("id")
        data = json.dumps(slim, separators=(",", ":")).encode()
    return data + b"\n"


def _plain(value: Any) -> Any:
    """Arguments as an agent would have sent them (Enum members and tuples back to JSON)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class BundleRunner:
    """Bundle modules loaded once, and the ops over them.

    ``module_prefix`` keeps two bundles in one interpreter apart (the ``inprocess`` backend):
    the modules are registered as ``<prefix>tools`` etc., never as plain ``tools``.
    """

    def __init__(
        self,
        bundle_dir: Path,
        *,
        module_prefix: str,
        max_stdout_bytes: int,
        defer: tuple[str, ...] = (),
        bytecode: Path | None = None,
    ) -> None:
        self.bundle_dir = Path(bundle_dir)
        # The host's compiled code of the code files (sandbox/bytecode.py), used where present:
        # every worker start used to compile them (1.2-1.4x resets/s without, docs/SANDBOX.md).
        self.bytecode = bytecode
        self.prefix = module_prefix
        # Files ``load`` skips, imported at their first use instead (see _function).
        self.deferred = {name for name in defer if name in CODE_FILES and name != "tools.py"}
        self._broken: dict[str, RunnerReply] = {}  # a deferred file that failed: its import error
        self.capture = TextCapture(max_stdout_bytes)
        self.modules: dict[str, types.ModuleType] = {}
        self.tools: dict[str, Callable[..., Any]] = {}
        self.coercers: dict[str, Callable[[dict[str, Any]], dict[str, Any]] | None] = {}
        self.state: Path | None = None
        self._loaded: RunnerReply | None = None
        self._files = {str(self.bundle_dir / name): name for name in CODE_FILES}
        self.ops: dict[str, Callable[[dict[str, Any]], RunnerReply]] = {
            "load": self.load,
            "reset": self.reset,
            "call": self.call,
            "solve": self.solve,
            "verify": self.verify,
        }

    def handle(self, request: dict[str, Any]) -> RunnerReply:
        op = self.ops.get(request.get("op", ""))
        if op is None:
            return error("protocol", f"unknown op {request.get('op')!r}")
        try:
            return op(request)
        except MemoryError:
            return error("memory", "MemoryError: out of memory (the sandbox's memory limit)")
        except Exception as exc:  # a bug here, not in bundle code: still never raise
            return error("exception", f"internal error in the sandbox runner: {exc!r}")

    # -- ops -------------------------------------------------------------------------------
    def load(self, request: dict[str, Any]) -> RunnerReply:
        if self._loaded is None:  # module code runs once; later loads repeat the answer
            self._loaded = self._load()
        return self._loaded

    def _load(self) -> RunnerReply:
        for name in CODE_FILES:
            path = self.bundle_dir / name
            if name in self.deferred:
                continue
            if not path.is_file():
                if name == "tools.py":
                    return error("not_found", "tools.py is missing", file=name)
                continue
            problem = self._import(name, path, self.state)
            if problem is not None:
                return problem
        specs = []
        for fn in public_tools(self.modules["tools.py"]):
            try:
                spec = function_schema(fn)
            except ToolSchemaError as exc:
                self.tools.clear()
                line = fn.__code__.co_firstlineno
                return error("exception", f"tools.py line {line}: {exc}", file="tools.py")
            specs.append(
                {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
            )
            self.tools[fn.__name__] = fn
            self.coercers[fn.__name__] = argument_coercer(fn)
        return {"ok": True, "value": {"tools": specs}}

    def reset(self, request: dict[str, Any]) -> RunnerReply:
        path = Path(request["state_dir"])
        if not path.is_dir():
            return error("not_found", "the episode state directory does not exist")
        if self.state is not None:
            runtime.close_connections(self.state)
        self.state = path
        return {"ok": True, "value": None}

    def call(self, request: dict[str, Any]) -> RunnerReply:
        return self.call_tool(request["name"], request.get("arguments") or {})

    def call_tool(self, name: str, arguments: dict[str, Any]) -> RunnerReply:
        """The ``call`` op without its request (the in-process backend's per-step path)."""
        fn = self.tools.get(name)
        if fn is None:
            return error("not_found", f"no tool named {name!r}")
        return self._run(fn, arguments, self.coercers[name])

    def solve(self, request: dict[str, Any]) -> RunnerReply:
        fn = self._function("solution.py", request["function"])
        if isinstance(fn, dict):
            return fn
        submit_tool = request.get("submit_tool")
        if submit_tool is not None and submit_tool not in self.tools:
            return error("not_found", f"submit tool {submit_tool!r} is not a tool of this bundle")
        recorder = _Recorder(self, submit_tool)

        def run() -> None:
            result = fn(recorder.namespace(), request.get("task") or {})
            if submit_tool is None:
                recorder.submission = {"content": result if isinstance(result, str) else ""}

        reply = self._run(run, {})
        reply["calls"] = recorder.calls
        reply["submission"] = recorder.submission
        return reply

    def verify(self, request: dict[str, Any]) -> RunnerReply:
        fn = self._function("verifier.py", request["function"])
        if isinstance(fn, dict):
            return fn

        def run() -> dict[str, Any]:
            report = fn(request.get("submission") or {}, request.get("task") or {})
            if not isinstance(report, dict):
                raise TypeError(
                    f"the verifier returned {type(report).__name__}, expected a report dict"
                )
            return report

        return self._run(run, {})

    # -- helpers ---------------------------------------------------------------------------
    def _import(self, name: str, path: Path, state: Path | None) -> RunnerReply | None:
        module = types.ModuleType(self.prefix + path.stem)
        module.__file__ = str(path)
        # Compile from source ourselves: importlib would write __pycache__ into the bundle
        # (changing its content hash) wherever the bundle directory is writable.
        code = self._compiled(name)
        if code is None:
            try:
                code = compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
            except SyntaxError as exc:
                return error(
                    "exception", f"{name} line {exc.lineno}: SyntaxError: {exc.msg}", file=name
                )
        sys.modules[module.__name__] = module  # dataclasses and typing look modules up here
        try:
            with self._activated(state), self._captured():
                exec(code, module.__dict__)
        except BaseException as exc:  # noqa: BLE001 - SystemExit at import time is a bundle bug too
            sys.modules.pop(module.__name__, None)
            line = _last_line(exc, str(path))
            where = f"{name} line {line}" if line else name
            return error("exception", f"{where}: failed to import\n{self._format(exc)}", file=name)
        self.modules[name] = module
        return None

    def _compiled(self, name: str) -> types.CodeType | None:
        """``name``'s code as the host compiled it, or None (compile from source then)."""
        if self.bytecode is None:
            return None
        try:
            code = marshal.loads((self.bytecode / name).read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None

    def _function(self, file: str, name: str) -> Callable[..., Any] | RunnerReply:
        if file in self.deferred:
            # Imported with no episode state, as ``load`` would have (it runs before reset).
            self.deferred.discard(file)
            if (self.bundle_dir / file).is_file():
                problem = self._import(file, self.bundle_dir / file, state=None)
                if problem is not None:
                    self._broken[file] = problem
        if file in self._broken:
            return self._broken[file]
        module = self.modules.get(file)
        if module is None:
            return error("not_found", f"{file} is missing or was not loaded")
        fn = getattr(module, name, None)
        if not callable(fn) or name.startswith("_"):
            return error("not_found", f"{file} has no function {name!r}")
        return fn

    @contextmanager
    def _activated(self, state: Path | None) -> Iterator[None]:
        # Set the ContextVar around every call rather than once per reset: in-process, several
        # runners (environments) share one interpreter and must not see each other's state.
        token = runtime._state_dir.set(state)
        try:
            yield
        finally:
            runtime._state_dir.reset(token)

    @contextmanager
    def _captured(self) -> Iterator[None]:
        _route()
        saved = getattr(_local, "capture", None)
        _local.capture = self.capture
        try:
            yield
        finally:
            _local.capture = saved

    def _run(
        self,
        fn: Callable[..., Any],
        arguments: dict[str, Any],
        coerce: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> RunnerReply:
        """Call bundle code; exceptions become error replies, printed output goes in ``stdout``.

        Written out rather than with the context managers above: this is the per-call hot path.
        """
        token = runtime._state_dir.set(self.state)
        if type(sys.stdout) is not _Router or type(sys.stderr) is not _Router:
            _route()
        saved = getattr(_local, "capture", None)
        _local.capture = self.capture
        try:
            reply: RunnerReply = {
                "ok": True,
                "value": fn(**(coerce(arguments) if coerce else arguments)),
            }
        except MemoryError as exc:
            exc.__traceback__ = None  # drop the frames that hold the memory
            reply = error("memory", "MemoryError: out of memory (the sandbox's memory limit)")
        except BaseException as exc:  # noqa: BLE001 - sys.exit() in a tool is the tool's error
            reply = error("exception", self._format(exc))
        finally:
            _local.capture = saved
            runtime._state_dir.reset(token)
        if self.capture.used:
            reply["stdout"] = self.capture.take()
        return reply

    def _format(self, exc: BaseException) -> str:
        """A traceback of bundle frames only, with file names relative to the bundle."""
        import traceback  # here, not at the top: a worker start pays ~6M instructions for it

        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in self._files]
        lines = []
        if frames:
            lines.append("Traceback (most recent call last):")
            for f in frames[-_MAX_FRAMES:]:
                lines.append(f'  File "{self._files[f.filename]}", line {f.lineno}, in {f.name}')
                source = (f.line or linecache.getline(f.filename, f.lineno or 0)).strip()
                if source:
                    lines.append(f"    {source}")
        lines.extend(line.rstrip("\n") for line in traceback.format_exception_only(type(exc), exc))
        text = "\n".join(lines)
        return (
            text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 20] + "\n[... truncated]"
        )


def _last_line(exc: BaseException, filename: str) -> int | None:
    import traceback  # see BundleRunner._format

    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return lines[-1] if lines else None


class _Recorder:
    """The ``tools`` object a gold solution gets: the tool functions, each call recorded."""

    def __init__(self, runner: BundleRunner, submit_tool: str | None) -> None:
        self.runner = runner
        self.submit_tool = submit_tool
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.submission: dict[str, Any] | None = None

    def namespace(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            **{name: self._wrap(name, fn) for name, fn in self.runner.tools.items()}
        )

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        coerce = self.runner.coercers[name]

        def tool(*args: Any, **kwargs: Any) -> Any:
            if self.submission is not None and self.submit_tool is not None:
                raise RuntimeError(f"{name} called after {self.submit_tool} ended the episode")
            arguments = _plain(dict(signature.bind(*args, **kwargs).arguments))
            self.calls.append((name, arguments))
            value = fn(**(coerce(arguments) if coerce else arguments))
            if name == self.submit_tool:  # only a submit call that succeeded ends the episode
                self.submission = arguments
            return value

        tool.__name__ = tool.__qualname__ = name
        tool.__doc__ = fn.__doc__
        return tool
