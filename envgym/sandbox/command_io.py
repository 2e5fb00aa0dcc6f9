"""The parts both command backends share (``command_jail`` for bwrap, ``command_docker``).

* :data:`BOOT`, the stdlib-only launcher that runs inside the jail or container: rlimits,
  privilege drop, signal dispositions, working directory, ``exec``, and a status report saying
  whether it got that far;
* the command's environment and, for installs, the host's pip settings (``pip config list``,
  merged into one pip.conf) and the local paths they point at;
* :class:`Capture`, the host file an output stream goes to, kept to its tail on disk.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import os
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path

from envgym.sandbox.jail import BOOT, write_identity  # noqa: F401 - re-exported for the command backends
from envgym.state import chown_tree

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUN_DIR = "/run/envgym"  # jail-side home of the generated pip.conf (and Docker's io files)
PIP_CONF = f"{RUN_DIR}/pip.conf"
_NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl/certs")
_PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")

# BOOT (``python -I -S -c BOOT SPEC ARGV...``) is the one launcher every jail shares: jail.py.


def hand_over(path: Path, uid: int, gid: int) -> None:
    """Give a writable mount to the jail's uid (``chown_tree``: no links followed, hard-linked
    files skipped).  The host stays root, so it can still read and delete everything."""
    if path.is_dir() and not path.is_symlink():
        chown_tree(path, uid, gid)
    elif path.is_file() and os.stat(path, follow_symlinks=False).st_nlink == 1:
        os.chown(path, uid, gid, follow_symlinks=False)


def jail_env(env: Mapping[str, str] | None, network: bool) -> dict[str, str]:
    """The command's whole environment: nothing of the host's but, for installs, its pip settings."""
    full = {"PATH": DEFAULT_PATH, "HOME": "/tmp", "LANG": "C.UTF-8"}
    if network:
        full.update(
            {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in _PROXY_VARS}
        )
        if host_pip_config()[0]:
            full["PIP_CONFIG_FILE"] = PIP_CONF
        else:
            full.pop("PIP_CONFIG_FILE", None)
    full.update(env or {})
    return full


@functools.lru_cache(maxsize=1)
def host_pip_config() -> tuple[str, tuple[Path, ...]]:
    """The host pip's merged configuration as one pip.conf text (``pip config list``: every
    file pip reads, already merged), and the local paths it and ``$PIP_*`` point at (find-links
    directories, ``file://`` indexes, the CA bundle) to mount read-only for installs."""
    sections: dict[str, list[str]] = {}
    values = [v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_CONFIG_FILE"]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = done.stdout.splitlines() if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        lines = []
    for line in lines:  # global.find-links='/opt/wheels'
        key, sep, raw = line.partition("=")
        section, dot, name = key.partition(".")
        if not (sep and dot) or section == ":env:":  # :env: entries are $PIP_* (passed as such)
            continue
        try:
            value = str(ast.literal_eval(raw))  # pip prints the value's repr()
        except (ValueError, SyntaxError):
            value = raw.strip().strip("'\"")
        sections.setdefault(section, []).append(f"{name} = " + value.replace("\n", "\n  "))
        values.append(value)
    text = "".join(f"[{s}]\n" + "\n".join(items) + "\n" for s, items in sections.items())
    return text, _local_paths(values)


def _local_paths(values: Sequence[str]) -> tuple[Path, ...]:
    paths: set[Path] = set()
    for token in (t for value in values for t in value.split()):
        if token.startswith("file://"):
            path = Path(urllib.parse.unquote(urllib.parse.urlparse(token).path))
            if path.name == "simple":  # a PEP 503 index links to ../../files/...: mount its base
                path = path.parent
        elif token.startswith("/"):
            path = Path(token)
        else:
            continue
        # Never a top-level directory (/, /root, /home): config pointing there is not a reason
        # to show a whole tree to the command.
        if len(path.parts) >= 3 and path.exists():
            paths.add(path)
    return tuple(sorted(paths))


def readonly_extras(network: bool) -> list[Path]:
    """Host paths the jail sees read-only at the same place: for installs, name resolution,
    the CA bundle and pip's local indexes."""
    if not network:
        return []
    found = [Path(p) for p in _NETWORK_FILES if os.path.exists(p)] + list(host_pip_config()[1])
    found.sort(key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in found:  # drop what an already-kept directory shows anyway
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept


class Capture:
    """A host file one output stream goes to; keeps roughly the last ``keep`` bytes on disk."""

    _STEP = 8 * 1024 * 1024  # punch in steps this large: one syscall per 8 MiB of flood

    def __init__(self, keep: int, path: Path | None = None) -> None:
        self.keep = keep
        self.file = open(path, "w+b") if path is not None else tempfile.TemporaryFile()  # noqa: SIM115
        self.punched = 0

    def fileno(self) -> int:
        return self.file.fileno()

    def trim(self) -> None:
        """Free the disk blocks of everything before the tail (the file keeps its size)."""
        size = os.fstat(self.fileno()).st_size
        cut = (size - self.keep) // self._STEP * self._STEP
        if cut > self.punched and _punch_hole(self.fileno(), self.punched, cut - self.punched):
            self.punched = cut

    def tail(self) -> tuple[str, bool]:
        size = os.fstat(self.fileno()).st_size
        start = max(0, size - self.keep)
        return os.pread(self.fileno(), size - start, start).decode(
            "utf-8", errors="replace"
        ), start > 0

    def close(self) -> None:
        self.file.close()


def _punch_hole(fd: int, offset: int, length: int) -> bool:
    libc = _libc()
    if libc is None:
        return False
    mode = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
    return libc.fallocate(fd, mode, ctypes.c_int64(offset), ctypes.c_int64(length)) == 0


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        return libc
    except (OSError, AttributeError):
        return None
