"""The worker's sealed drop (envgym/sandbox/seal.py), in both bwrap modes.

A host with a session keyring (ssh sessions under pam_keyinit, systemd services) used to hand it
to every jailed worker: bundle code could read the host's keys and leave keys for other
episodes.  And ``setuid`` left the inheritable capability set as it was (the fork server's
episodes kept CAP_SYS_ADMIN there).  Each test here was red before the seal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from envgym.sandbox.fork import ENV_SWITCH
from envgym.sandbox.seal import key_filter

pytestmark = pytest.mark.timeout(180)

TOOLS = '''
import ctypes
import os
import platform

_KEYCTL, _ADD_KEY = {"x86_64": (250, 248), "aarch64": (219, 217)}[platform.machine()]
_libc = ctypes.CDLL(None, use_errno=True)


def creds() -> dict:
    """The worker's ids and capability sets, as /proc shows them."""
    status = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        status[key] = value.strip()
    return {k: status[k] for k in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapAmb",
                                   "NoNewPrivs", "Seccomp")}


def host_keys() -> dict:
    """Everything a worker can learn of keyrings: /proc/keys and the key syscalls."""
    try:
        listed = open("/proc/keys").read()
    except OSError as exc:
        listed = f"unreadable: {exc.strerror}"
    ctypes.set_errno(0)
    found = _libc.syscall(ctypes.c_long(_KEYCTL), ctypes.c_long(0), ctypes.c_long(-3), ctypes.c_long(0))
    get_errno = ctypes.get_errno()
    ctypes.set_errno(0)
    added = _libc.syscall(ctypes.c_long(_ADD_KEY), b"user", b"envgym-planted", b"from an episode",
                          ctypes.c_size_t(15), ctypes.c_long(-3))
    return {"listed": listed, "session": [found, get_errno], "add": [added, ctypes.get_errno()]}
'''

# A host process started in a session with a keyring (pam_keyinit, systemd), as a child of the
# test: it joins a session keyring holding a secret before it starts any thread (credentials,
# keyrings included, are per thread and inherited), then opens two sandboxes of one bundle.
HOST = """
import ctypes, json, platform, sys
keyctl, add_key = {"x86_64": (250, 248), "aarch64": (219, 217)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(1), b"envgym-test-session") < 0:
    print(json.dumps({"skip": "no session keyring: " + str(ctypes.get_errno())})); sys.exit()
key = libc.syscall(ctypes.c_long(add_key), b"user", b"envgym-secret", b"host secret",
                   ctypes.c_size_t(11), ctypes.c_long(-3))
assert key > 0
from envgym.sandbox import Limits, open_sandbox
from envgym.state import EpisodeDirs
bundle = sys.argv[1]
seen = []
for _ in range(2):
    episode = EpisodeDirs(bundle + "/state", quota_bytes=8 << 20)
    with open_sandbox(bundle, "bwrap", Limits(call_timeout_s=20)) as box:
        box.reset(episode.refill())
        seen.append({tool: box.call_tool(tool, {}) for tool in ("host_keys", "creds")})
        seen[-1] = {"fork": box.fork, **{t: [o.ok, o.value, o.message] for t, o in seen[-1].items()}}
    episode.cleanup()
from envgym.sandbox.command_jail import run_command
from envgym.sandbox.jail import python_executable
probe = ("import ctypes, json, platform; nr = {'x86_64': 250, 'aarch64': 219}[platform.machine()]; "
         "libc = ctypes.CDLL(None, use_errno=True); "
         "r = libc.syscall(ctypes.c_long(nr), ctypes.c_long(0), ctypes.c_long(-3), ctypes.c_long(0)); "
         "st = dict(l.split(':', 1) for l in open('/proc/self/status')); "
         "print(json.dumps({'session': [r, ctypes.get_errno()], "
         "**{k: st[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapAmb', 'Seccomp', 'Uid')}}))")
done = run_command([str(python_executable()), "-I", "-S", "-c", probe], mounts=[], workdir="/")
command = json.loads(done.stdout) if done.ok else {"failed": done.stderr + str(done.error)}
print(json.dumps({"key": key, "seen": seen, "command": command}))
"""


@pytest.fixture(params=["bwrap", "bwrap-fork"])
def seen(
    request: pytest.FixtureRequest,
    require_backend: Callable[[str], None],
    make_bundle: Callable[..., Path],
) -> dict:
    require_backend("bwrap")
    if os.geteuid() != 0:
        pytest.skip("a jail uid and the fork server need a root host (a user's jail is its own)")
    env = {**os.environ, ENV_SWITCH: "1" if request.param == "bwrap-fork" else "0"}
    done = subprocess.run(
        [sys.executable, "-c", HOST, str(make_bundle(TOOLS))],
        env=env, capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    for episode in result["seen"]:
        assert episode["fork"] == (request.param == "bwrap-fork"), episode
        for tool in ("host_keys", "creds"):
            assert episode[tool][0], episode[tool]
    return result


def test_workers_neither_see_nor_use_the_hosts_keyring(seen: dict) -> None:
    for episode in seen["seen"]:
        keys = episode["host_keys"][1]
        # The key syscalls are refused outright (ENOSYS), so nothing is read or planted ...
        assert keys["session"] == [-1, 38], keys
        assert keys["add"] == [-1, 38], keys
        # ... and the host's session keyring is not the worker's: its keys are not listed.
        assert "envgym-secret" not in keys["listed"], keys["listed"]
        assert f"{seen['key']:08x}" not in keys["listed"], keys["listed"]


def test_command_jails_are_sealed_too(seen: dict) -> None:
    """The agent's shell commands (SWE's bash, installs, tests) and the MCP servers start through
    jail.BOOT, which runs the same seal after its setuid."""
    command = seen["command"]
    assert command.get("session") == [-1, 38], command
    for name in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert command[name] == "0000000000000000", command
    assert command["Seccomp"] == "2" and int(command["Uid"].split()[0]) >= 1 << 20, command


def test_workers_hold_no_capability_in_any_set(seen: dict) -> None:
    for episode in seen["seen"]:
        creds = episode["creds"][1]
        for name in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
            assert creds[name] == "0000000000000000", creds
        assert creds["NoNewPrivs"] == "1" and creds["Seccomp"] == "2", creds
        uid = creds["Uid"].split()
        assert len(set(uid)) == 1 and int(uid[0]) >= 1 << 20, creds
        assert creds["Groups"] == "", creds


def test_the_filter_refuses_exactly_the_key_calls_and_foreign_abis() -> None:
    """The BPF program, instruction by instruction, run by a tiny interpreter: what the kernel
    would answer for each syscall number and architecture."""
    arch = 0xC000003E
    code = key_filter(arch, (248, 249, 250), x32=True)

    def run(nr: int, audit_arch: int) -> int:
        import struct

        data = struct.pack("=iI", nr, audit_arch)
        insns = [struct.unpack_from("=HBBI", code, 8 * i) for i in range(len(code) // 8)]
        pc, acc = 0, 0
        while True:
            op, jt, jf, k = insns[pc]
            if op == 0x20:
                acc = struct.unpack_from("=I", data, k)[0]
                pc += 1
            elif op in (0x15, 0x35):
                hit = acc == k if op == 0x15 else acc >= k
                pc += 1 + (jt if hit else jf)
            else:
                return k

    allow, enosys = 0x7FFF0000, 0x00050000 | 38
    for nr in (0, 1, 59, 247, 251, 435):
        assert run(nr, arch) == allow, nr
    for nr in (248, 249, 250, 0x40000000 + 250, 0x40000000):
        assert run(nr, arch) == enosys, nr
    assert run(0, 0x40000003) == enosys  # i386 via int 0x80: not this ABI
