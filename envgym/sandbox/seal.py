"""The last step of a jailed worker's privilege drop, before any bundle code runs.

``setuid`` alone leaves three things a hostile bundle could use (found in a review of the
sandbox; each is tested in tests/test_sandbox_seal.py):

* **Kernel keyrings.**  ``setuid`` keeps the process's session keyring, so a worker started by
  a host that has one (ssh and login sessions under ``pam_keyinit``; systemd services) would
  *possess* it: read, plant or clear the host's keys (Kerberos caches, network-filesystem
  credentials), and use it as a channel to concurrent and later episodes.  The worker joins a
  new, empty session keyring, then a seccomp filter refuses ``add_key``, ``request_key`` and
  ``keyctl`` outright (ENOSYS), which also closes the per-uid user keyring, a channel between
  jails that ever share a uid.
* **Inheritable capabilities.**  ``setuid`` clears the permitted, effective and ambient sets but
  not the inheritable one (the fork server's episodes kept CAP_SYS_ADMIN there).  Harmless while
  no_new_privs holds, but not "no capabilities": all three sets are cleared here.
* **An unchecked drop.**  With ``SECBIT_NO_SETUID_FIXUP`` set on the host, capabilities survive
  ``setuid``.  After the steps above the worker checks every uid, gid, its groups and every
  capability set, and refuses to run (``SystemExit``) unless all are as asked.

Stdlib only (it runs in the jail's Python, imported by worker.py); Linux, x86-64 and arm64 (the
seccomp filter needs the architecture's syscall numbers; elsewhere the worker refuses to run).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING = 0, 1
KEY_SPEC_SESSION_KEYRING = -3
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
ENOSYS = 38

# (seccomp's AUDIT_ARCH_*, keyctl, add_key, request_key) per machine.
_ARCHES = {
    "x86_64": (0xC000003E, 250, 248, 249),
    "aarch64": (0xC00000B7, 219, 217, 218),
}
_X32_SYSCALL_BIT = 0x40000000  # x86-64's x32 ABI: its own numbers for the same calls

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def _fail(what: str) -> SystemExit:
    err = ctypes.get_errno()
    detail = f": {os.strerror(err)}" if err else ""
    return SystemExit(f"envgym worker: {what}{detail}; refusing to run bundle code")


def _syscall_numbers() -> tuple[int, int, int, int]:
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        raise SystemExit(
            f"envgym worker: no keyring filter for machine {platform.machine()!r} "
            f"(known: {', '.join(_ARCHES)}); refusing to run bundle code"
        )
    return arch


def key_filter(audit_arch: int, numbers: tuple[int, ...], x32: bool) -> bytes:
    """A seccomp BPF program: ENOSYS for the key syscalls ``numbers`` (and for every call of
    another architecture's ABI, or of x86-64's x32 ABI when ``x32``), everything else allowed."""
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    allow, refuse = 0x7FFF0000, 0x00050000 | ENOSYS  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    checks = [(jge, _X32_SYSCALL_BIT)] if x32 else []
    checks += [(jeq, nr) for nr in numbers]
    n = len(checks)
    # Jump offsets count from the next instruction; the last two are "allow", then "refuse".
    prog = [(ld_abs, 0, 0, 4), (jeq, 0, n + 2, audit_arch), (ld_abs, 0, 0, 0)]
    prog += [(op, n - i, 0, k) for i, (op, k) in enumerate(checks)]
    prog += [(ret, 0, 0, allow), (ret, 0, 0, refuse)]
    return b"".join(struct.pack("=HBBI", *insn) for insn in prog)


def _deny_key_syscalls() -> None:
    audit_arch, keyctl, add_key, request_key = _syscall_numbers()
    code = key_filter(audit_arch, (add_key, request_key, keyctl), platform.machine() == "x86_64")
    prog = _SockFprog(len(code) // 8, code)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("could not set no_new_privs")
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise _fail("could not install the keyring filter")


def _join_new_session_keyring() -> None:
    keyctl = _syscall_numbers()[1]
    serial = _libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None)
    if serial < 0:
        if ctypes.get_errno() == ENOSYS:  # a kernel without keys: there is nothing to leave
            return
        raise _fail("could not leave the host's session keyring")
    now = _libc.syscall(
        ctypes.c_long(keyctl),
        ctypes.c_long(KEYCTL_GET_KEYRING_ID),
        ctypes.c_long(KEY_SPEC_SESSION_KEYRING),
        ctypes.c_long(0),
    )
    if now != serial:
        raise _fail("the new session keyring did not take")


def capability_sets() -> tuple[int, int, int]:
    """(effective, permitted, inheritable) of this process, all 64 bits of each."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) != 0:
        raise _fail("could not read the capability sets")
    low, high = data[0], data[1]
    return (
        low.effective | high.effective << 32,
        low.permitted | high.permitted << 32,
        low.inheritable | high.inheritable << 32,
    )


def clear_capability_sets() -> None:
    """Effective, permitted and inheritable emptied (lowering needs no privilege); the ambient
    set is a subset of permitted ∩ inheritable (the kernel keeps it so): empty too."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    if _libc.capset(ctypes.byref(header), (_CapData * 2)()) != 0:
        raise _fail("could not clear the capability sets")


def seal(uid: int | None, gid: int | None) -> None:
    """After the worker's ``setuid``/``setgid`` (``uid``/``gid``; None: it kept the host's, in a
    user namespace): a fresh session keyring, every capability set empty, the key syscalls
    refused; then the drop is checked, and any surprise ends the worker before bundle code."""
    _join_new_session_keyring()
    clear_capability_sets()
    _deny_key_syscalls()
    if uid is not None and set(os.getresuid()) != {uid}:
        raise SystemExit(f"envgym worker: uids {os.getresuid()} after the drop, not {uid}")
    if gid is not None and (set(os.getresgid()) != {gid} or os.getgroups()):
        raise SystemExit(
            f"envgym worker: gids {os.getresgid()} and groups {os.getgroups()} after the drop"
        )
    if any(capability_sets()):
        raise SystemExit(f"envgym worker: capabilities {capability_sets()} left after the drop")
