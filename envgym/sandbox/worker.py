"""The sandbox worker: a persistent process that runs bundle code for the host.

Started as a script (``python -I -S -B .../envgym/sandbox/worker.py CONFIG_JSON``) inside
bubblewrap or a container; bubblewrap runs its compiled copy, ``worker.pyc`` (worker_stage.py).  Stdlib only, plus envgym.runtime / envgym.tool_schema /
envgym.sandbox.runner, which it imports without running ``envgym/__init__.py`` (that pulls in
host-only dependencies the sandbox's Python does not have).

Protocol: one JSON object per line each way.  Requests ``{"id": n, "op": ..., ...}``; replies
``{"id": n, "ok": ..., ...}`` (see runner.py).  Reply ``id`` 0 is the hello sent once ready.

Before any bundle code runs the worker moves its request/reply channel to private fds, points
fd 0 at /dev/null and fds 1/2 at a memfd (so a bundle that prints, or writes to fd 1, cannot
corrupt the protocol), applies rlimits and drops to an unprivileged uid when asked to.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import types
from pathlib import Path
from typing import Any

RLIMITS = {
    "AS": resource.RLIMIT_AS,
    "CPU": resource.RLIMIT_CPU,
    "FSIZE": resource.RLIMIT_FSIZE,
    "NPROC": resource.RLIMIT_NPROC,
    "CORE": resource.RLIMIT_CORE,
}


def _bootstrap(root: Path) -> None:
    """Make ``envgym.*`` importable without executing the host-side package ``__init__``s."""
    for name in ("envgym", "envgym.sandbox"):
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = module
    # a bare ModuleType declares no attributes; this links the package to its subpackage
    sys.modules["envgym"].sandbox = sys.modules["envgym.sandbox"]  # type: ignore[attr-defined]


def _claim_channel(config: dict[str, Any]) -> tuple[int, int, int]:
    """(request fd, reply fd, capture fd); fds 0/1/2 no longer reach the host afterwards."""
    if config.get("connect"):
        import socket  # only the Docker transport needs it; keep the bwrap boot lean

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(config["connect"])
        req = os.dup(sock.fileno())
        rep = os.dup(sock.fileno())
        sock.close()
    else:
        req, rep = os.dup(0), os.dup(1)  # os.dup makes non-inheritable copies
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    capture = os.memfd_create("envgym-output", os.MFD_CLOEXEC)
    os.dup2(capture, 1)
    os.dup2(capture, 2)
    return req, rep, capture


def _apply_limits(config: dict[str, Any]) -> None:
    for name, (soft, hard) in config.get("rlimits", {}).items():
        current_soft, current_hard = resource.getrlimit(RLIMITS[name])
        # Only ever lower: raising would fail without privileges (and is not our business).
        hard = hard if current_hard == resource.RLIM_INFINITY else min(hard, current_hard)
        resource.setrlimit(RLIMITS[name], (min(soft, hard), hard))
    # Over RLIMIT_FSIZE a write should fail (EFBIG, an exception in the tool), not kill us.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    uid, gid = config.get("uid"), config.get("gid")
    if uid is not None and gid is not None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise SystemExit("envgym worker: failed to drop privileges")
    if config.get("seal"):  # bwrap and forked workers (Docker: its own seccomp and keyring)
        from envgym.sandbox.seal import seal

        seal(uid, gid)


def _capture_fd_output(capture: int, cap: int) -> str:
    """What bundle code wrote straight to fds 1/2 since the last call (capped)."""
    size = os.lseek(capture, 0, os.SEEK_CUR)  # fds 1, 2 and capture share one offset
    if size == 0:
        return ""
    data = os.pread(capture, min(size, cap), 0)
    os.ftruncate(capture, 0)
    os.lseek(capture, 0, os.SEEK_SET)
    text = data.decode("utf-8", "replace")
    if size > cap:
        text += f"\n[... {size - cap} more bytes of output dropped]"
    return text


def _reap_strays() -> None:
    """Kill processes a call left behind (the sandbox has its own pid namespace and uid)."""
    try:
        os.kill(-1, signal.SIGKILL)  # every process we may signal, except ourselves
    except (ProcessLookupError, PermissionError):
        return
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: list[str]) -> int:
    _bootstrap(Path(__file__).resolve().parents[2])
    return serve(json.loads(argv[1]))


def serve(config: dict[str, Any]) -> int:
    """Serve one worker's requests on fds 0/1 (or ``config["connect"]``) until EOF.

    Also the entry of a forked episode worker (zygote.py), whose envgym modules are imported."""
    req, rep, capture = _claim_channel(config)
    _apply_limits(config)

    from envgym.sandbox.runner import BundleRunner, encode_reply  # after the fd shuffle

    max_reply = int(config["max_reply_bytes"])
    max_stdout = int(config["max_stdout_bytes"])
    reap = bool(config.get("reap_strays"))
    runner = BundleRunner(
        Path(config["bundle_dir"]),
        module_prefix="bundle_",
        max_stdout_bytes=max_stdout,
        defer=tuple(config.get("defer", ())),
        bytecode=Path(config["bytecode"]) if config.get("bytecode") else None,
    )
    me = os.getpid()
    hello = {"id": 0, "ok": True, "value": {"pid": me, "uid": os.getuid()}}
    _send(rep, encode_reply(hello, max_reply))
    requests = os.fdopen(req, "rb", buffering=1 << 16)
    for line in requests:
        try:
            request = json.loads(line)
            rid = request["id"]
        except (ValueError, KeyError, TypeError):
            _send(rep, b'{"id":null,"ok":false,"error":"protocol","message":"bad request"}\n')
            continue
        reply = runner.handle(request)
        if os.getpid() != me:  # a fork of ours came back from bundle code: it must not reply
            os._exit(0)
        printed = _capture_fd_output(capture, max_stdout)
        if printed:
            reply["stdout"] = (reply.get("stdout", "") + printed)[: max_stdout + 100]
        if reap:
            _reap_strays()
        reply["id"] = rid
        _send(rep, encode_reply(reply, max_reply))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
