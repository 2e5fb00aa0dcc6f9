"""The bwrap worker's code, staged once per host process with its bytecode compiled.

A worker imports seven envgym modules (``WORKER_MODULES``).  It used to see the whole package and
compile them from source at every start: the worker runs with ``-B`` and the host here with
``PYTHONDONTWRITEBYTECODE``, so no ``__pycache__`` existed (a read-only install has the same
effect), and the worker script itself is always compiled when run from source.  Compiling was
~15% of the instructions of a worker start (valgrind: 228M against 185M for the imports).

So the host copies these modules once per process into a private directory, compiles them there
(``UNCHECKED_HASH`` pycs: the copies never change, so the worker does not read the sources to
check them) and the jail mounts that directory read-only at ``/opt/envgym/envgym`` in place of
the whole package.  The worker is started from its compiled script (``sandbox/worker.pyc``).
The sandbox now sees less of the host (these modules, not all of envgym); bundle code may import
only the stdlib and ``envgym.runtime``, as before.
"""

from __future__ import annotations

import atexit
import os
import py_compile
import shutil
import sys
import tempfile
import threading
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # .../envgym
# What the worker imports (worker.py, runner.py and what they import from envgym); a test
# checks that no envgym import of these names a module missing here.
WORKER_MODULES = (
    "runtime.py",
    "tool_schema.py",
    "sandbox/base.py",
    "sandbox/runner.py",
    "sandbox/seal.py",
    "sandbox/worker.py",
    "sandbox/zygote.py",
)
# Run as scripts (their pycs beside them, as well as in __pycache__ for importing).
SCRIPTS = ("sandbox/worker.py", "sandbox/zygote.py")
WORKER_SCRIPT = "sandbox/worker.pyc"  # the compiled worker script, relative to the stage
ZYGOTE_SCRIPT = "sandbox/zygote.pyc"  # the fork server (zygote.py), relative to the stage
_lock = threading.Lock()
_staged: dict[int, Path] = {}  # host pid -> its stage (a forked child stages its own)


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork)


def worker_package(sandbox_package: str) -> Path:
    """This process's staged copy of the worker's modules (made on first use).

    ``sandbox_package`` is where the jail mounts it; compiled code names files there.
    """
    pid = os.getpid()
    with _lock:
        stage = _staged.get(pid)
        if stage is None or not (stage / WORKER_SCRIPT).is_file():
            stage = _stage(sandbox_package)
            _staged[pid] = stage
        return stage


def _stage(sandbox_package: str) -> Path:
    top = Path(tempfile.mkdtemp(prefix="envgym-worker-"))
    atexit.register(_remove, top, os.getpid())
    stage = top / "envgym"
    for rel in WORKER_MODULES:
        source = PACKAGE_DIR / rel
        target = stage / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        # Scripts are run as files (their pyc beside them, see WORKER_SCRIPT); every module
        # is also imported (the fork server imports the worker), so a pyc goes where the
        # import system looks.
        cfiles = [
            target.parent / "__pycache__" / f"{target.stem}.{sys.implementation.cache_tag}.pyc"
        ]
        if rel in SCRIPTS:
            cfiles.append(target.with_suffix(".pyc"))
        for cfile in cfiles:
            py_compile.compile(
                str(target),
                cfile=str(cfile),
                dfile=f"{sandbox_package}/{rel}",
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
    # Readable (not writable) by the worker's unprivileged uid.
    for path in (top, *top.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return stage


def _remove(top: Path, pid: int) -> None:
    if os.getpid() == pid:  # not from a forked child's exit: the stage is its parent's
        shutil.rmtree(top, ignore_errors=True)
