"""Run one program in a jail, as a command line: for callers that can only start an argv.

An MCP client starts its stdio server from an argv and nothing else (no hook between fork and
exec, no host code after the spawn).  So the MCP suite's server command is this script, run on
the host by the base interpreter (``python -I -S -B jail_exec.py OPTIONS -- ARGV``), which:

1. picks the jail's uid (as root): the owner of the first ``--rw`` directory when that is
   already a jail uid (the bundle sandbox handed the episode state to its worker: the server
   then writes files the verifier owns too), else a fresh one, to which the ``--rw``
   directories are handed (``chown_tree``: no links followed, hard links skipped);
2. builds the jail from a :class:`~envgym.sandbox.jail.JailSpec`: the system directories and
   the ``--ro`` paths read-only, the ``--rw`` directories writable, a private size-capped
   ``/tmp``, an ``/etc`` with only passwd/group naming the jail's user, no network;
3. makes a cgroup for the jail's total memory and pids (``cgroup.py``) and joins it between
   fork and exec, then runs bwrap, whose first program is ``jail.BOOT`` (rlimits, drop to the
   uid, exec the server) — stdio passes straight through;
4. waits, forwards SIGTERM/SIGINT/SIGHUP as a kill of the whole jail, removes the cgroup and
   exits with the jail's status.  If this launcher itself is killed, ``--die-with-parent``
   takes the jail with it and a later jail sweeps the leftover group.

Stdlib only (the envgym package's ``__init__`` is not run: it pulls in host dependencies).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import types
from pathlib import Path

DEFAULTS = {
    "memory": 4 * 1024**3,
    "total-memory": 2 * 1024**3,
    "pids": 256,
    "file-bytes": 1024**3,
    "tmp-bytes": 256 * 1024**2,
}
USAGE = (
    "usage: jail_exec.py [--rw DIR]... [--ro PATH]... [--memory N] [--total-memory N] [--pids N] "
    "[--file-bytes N] [--tmp-bytes N] -- PROGRAM [ARGS...]"
)


def _bootstrap() -> None:
    """Make ``envgym.sandbox.*`` importable without running the package ``__init__``s."""
    root = Path(__file__).resolve().parents[2]
    for name in ("envgym", "envgym.sandbox"):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [str(root.joinpath(*name.split(".")))]
            sys.modules[name] = module


class UsageError(ValueError):
    pass


def parse(argv: list[str]) -> tuple[list[str], list[str], dict[str, int], list[str]]:
    """(rw dirs, ro paths, limits, program argv); UsageError names what is wrong."""
    if "--" not in argv:
        raise UsageError("no '--' before the program")
    split = argv.index("--")
    options, program = argv[:split], argv[split + 1 :]
    if not program:
        raise UsageError("no program after '--'")
    rw: list[str] = []
    ro: list[str] = []
    limits = dict(DEFAULTS)
    if len(options) % 2:
        raise UsageError(f"option {options[-1]!r} has no value")
    for name, value in zip(options[::2], options[1::2], strict=True):
        key = name.removeprefix("--")
        if name in ("--rw", "--ro"):
            path = os.path.realpath(value)
            if not os.path.isabs(value) or path == "/" or not os.path.exists(path):
                raise UsageError(
                    f"{name} {value!r}: an existing absolute path other than / is needed"
                )
            if name == "--rw" and not os.path.isdir(path):
                raise UsageError(f"--rw {value!r} is not a directory")
            (rw if name == "--rw" else ro).append(path)
        elif key in limits:
            if not value.isdigit() or int(value) <= 0:
                raise UsageError(f"{name} needs a positive integer, got {value!r}")
            limits[key] = int(value)
        else:
            raise UsageError(f"unknown option {name!r}")
    return rw, ro, limits, program


def main(argv: list[str]) -> int:
    _bootstrap()
    from envgym.sandbox.cgroup import open_cgroup
    from envgym.sandbox.jail import (
        BOOT,
        Bind,
        Dir,
        JailMount,
        JailSpec,
        Tmpfs,
        build_argv,
        is_jail_uid,
        plan_identity,
        python_executable,
        write_identity,
    )

    try:
        rw, ro, limits, program = parse(argv)
    except UsageError as exc:
        print(f"jail_exec: {exc}\n{USAGE}", file=sys.stderr)
        return 2
    root = os.geteuid() == 0
    owner = os.stat(rw[0]).st_uid if rw else 0
    rlimits = {"AS": limits["memory"], "FSIZE": limits["file-bytes"], "CORE": 0}
    identity = plan_identity(
        root, rlimits, limits["pids"], uid=owner if root and is_jail_uid(owner) else None
    )
    uid = identity.uid
    if uid is not None and uid != owner:
        from envgym.state import chown_tree  # only here: its imports cost ~25 ms per server start

        for path in rw:
            chown_tree(Path(path), uid, uid)
    cwd = os.getcwd()
    inside = any(cwd == p or cwd.startswith(p.rstrip("/") + "/") for p in rw + ro)
    with tempfile.TemporaryDirectory(prefix="envgym-jail-") as scratch:
        os.chmod(scratch, 0o755)
        passwd, group_file = write_identity(
            Path(scratch),
            uid if uid is not None else os.getuid(),
            uid if uid is not None else os.getgid(),
        )
        mounts: list[JailMount] = [
            Tmpfs("/tmp", size=limits["tmp-bytes"]),
            Dir("/etc"),
            Bind(str(passwd), "/etc/passwd"),
            Bind(str(group_file), "/etc/group"),
        ]
        mounts += [Bind(path, path) for path in sorted(ro, key=lambda p: len(Path(p).parts))]
        mounts += [
            Bind(path, path, writable=True) for path in sorted(rw, key=lambda p: len(Path(p).parts))
        ]
        # bwrap's own --chdir runs as root without capabilities: a 0700 directory of the jail's
        # uid would refuse it.  BOOT changes directory after dropping to that uid.
        spec = JailSpec(root=root, mounts=tuple(mounts), chdir="/")
        boot = {
            "uid": uid if uid is not None else -1,
            "gid": uid if uid is not None else -1,
            "cwd": cwd if inside else "/",
            "rlimits": identity.rlimits,
            "seal": True,  # a new keyring, no capabilities, key calls refused (seal.py)
        }
        full = build_argv(spec) + [
            str(python_executable()),
            "-I",
            "-S",
            "-B",
            "-c",
            BOOT,
            json.dumps(boot),
            *program,
        ]
        env = {**os.environ, "HOME": "/tmp"}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        group = open_cgroup(limits["total-memory"], limits["pids"])
        # Handlers first: a SIGTERM that came between the spawn and their installation would
        # end this launcher by default and could leave bwrap running (its parent-death signal
        # is armed by bwrap itself, a moment after the fork).
        started: list[subprocess.Popen[bytes]] = []
        stopped: list[int] = []

        def stop(signum: int, frame: object) -> None:
            stopped.append(signum)
            for proc in started:
                try:
                    os.killpg(
                        proc.pid, signal.SIGKILL
                    )  # bwrap's init has PDEATHSIG: the jail goes too
                except ProcessLookupError:
                    pass

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, stop)
        try:
            join = group.join_self if group is not None else None
            proc = subprocess.Popen(full, env=env, start_new_session=True, preexec_fn=join)  # noqa: PLW1509 - one thread
        except OSError as exc:
            if group is not None:
                group.remove()
            print(f"jail_exec: cannot start bubblewrap: {exc}", file=sys.stderr)
            return 126
        started.append(proc)
        if stopped:
            stop(stopped[0], None)
        try:
            code = proc.wait()
        finally:
            if group is not None:
                group.remove()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
