"""envgym.sandbox.jail: the one builder of every jail's bwrap argv and uid/rlimit plan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envgym.sandbox.jail import (
    BWRAP,
    UID_BASE,
    Bind,
    Dir,
    JailSpec,
    Only,
    Tmpfs,
    build_argv,
    isolation,
    plan_identity,
)


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


@pytest.mark.parametrize("root", [True, False])
def test_every_jail_gets_the_same_namespaces_and_privileges(root: bool) -> None:
    argv = build_argv(JailSpec(root=root))
    assert argv[0] == BWRAP
    for flag in (
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
    ):
        assert flag in argv
    if root:  # no user namespace (NPROC would not hold for uid 0); only setuid/setgid kept
        assert "--unshare-user" not in argv and argv[argv.index("--cap-drop") + 1] == "ALL"
        assert _pairs(argv, "--cap-add") == ["CAP_SETUID", "CAP_SETGID"]
    else:
        assert "--unshare-user" in argv and "--disable-userns" in argv
    assert argv[-4:] == ["--remount-ro", "/", "--chdir", "/"]


def test_network_is_the_only_namespace_a_spec_can_keep() -> None:
    assert "--unshare-net" not in isolation(True, network=True)
    assert "--unshare-pid" in isolation(True, network=True)
    assert "--unshare-net" not in build_argv(JailSpec(root=True, network=True))


def test_mounts_come_after_proc_and_dev_in_order_with_their_ancestors_searchable() -> None:
    spec = JailSpec(
        root=True,
        chdir="/w",
        mounts=(
            Tmpfs("/tmp", size=1024),
            Bind("/host/a", "/tmp/deep/a"),
            Bind("/host/w", "/w", writable=True),
            Dir("/etc"),
        ),
        after_dev=(Tmpfs("/dev/shm", size=10),),
    )
    argv = build_argv(spec)
    dev = argv.index("--dev")
    shm, tmp = argv.index("/dev/shm"), argv.index("/tmp")
    assert dev < shm < tmp < argv.index("/tmp/deep/a")  # a bind below /dev would not be hidden
    assert (
        argv[argv.index("/host/a") - 1] == "--ro-bind"
        and argv[argv.index("/host/w") - 1] == "--bind"
    )
    assert argv[argv.index("/tmp/deep") - 3 : argv.index("/tmp/deep")] == [
        "--perms",
        "0755",
        "--dir",
    ]
    assert argv[-2:] == ["--chdir", "/w"] and "--remount-ro" in argv


@pytest.mark.parametrize("target", ["relative", "/", "/a/../b", "/a/", ""])
def test_mount_targets_must_be_normalized_absolute_paths(target: str) -> None:
    with pytest.raises(ValueError, match="normalized absolute path"):
        Bind("/x", target)
    with pytest.raises(ValueError, match="normalized absolute path"):
        Tmpfs(target)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b"])
def test_only_takes_plain_names(name: str) -> None:
    with pytest.raises(ValueError, match="plain names"):
        Only("/usr/lib", (name,))


def test_only_hides_the_rest_of_a_directory(tmp_path: Path) -> None:
    (tmp_path / "keep").mkdir()
    argv = Only(str(tmp_path), ("keep", "absent")).argv()
    assert argv[:4] == ["--perms", "0755", "--tmpfs", str(tmp_path.resolve())]
    assert str(tmp_path.resolve() / "keep") in argv and "absent" not in " ".join(argv)
    assert argv[-2:] == ["--remount-ro", str(tmp_path.resolve())]


def test_identity_plan() -> None:
    rlimits = {"AS": 1 << 30, "CORE": 0}
    root = plan_identity(True, rlimits, 64)
    assert (
        root.uid is not None and root.uid >= UID_BASE and root.rlimits == {**rlimits, "NPROC": 64}
    )
    assert plan_identity(True, rlimits, 64).uid != root.uid  # fresh per jail
    assert plan_identity(True, rlimits, 64, uid=UID_BASE + 7).uid == UID_BASE + 7
    user = plan_identity(False, rlimits, 64)
    assert (
        user.uid is None and user.rlimits["NPROC"] > 64
    )  # counts the user's running processes too
    assert rlimits == {"AS": 1 << 30, "CORE": 0}  # the caller's dict is not changed


def test_chdir_must_be_absolute() -> None:
    with pytest.raises(ValueError, match="chdir"):
        JailSpec(root=os.geteuid() == 0, chdir="work")


def test_jail_uids_are_never_handed_out_twice() -> None:
    """Every launch gets a fresh uid (its RLIMIT_NPROC and per-uid kernel accounting are its
    own): the old (pid, counter % 1024) packing gave a long episode's uid to its 1025th
    successor."""
    from envgym.sandbox.jail import UID_BASE, allocate_uid

    uids = [allocate_uid() for _ in range(3000)]
    assert len(set(uids)) == len(uids) and min(uids) >= UID_BASE


def test_another_host_process_skips_the_uids_this_one_holds() -> None:
    """Host processes claim uids machine-wide: a second process that starts counting where this
    one did gets none of this one's uids (and gets them only after this one exits)."""
    import subprocess
    import sys

    from envgym.sandbox import jail

    held = [jail.allocate_uid() for _ in range(20)]
    child = (
        "import sys; from envgym.sandbox import jail\n"
        f"jail._uids._next = {held[0] - jail.UID_BASE}\n"
        "print(*[jail.allocate_uid() for _ in range(30)])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=True
    )
    theirs = [int(u) for u in done.stdout.split()]
    assert len(theirs) == 30 and not set(theirs) & set(held), (held, theirs)
    assert min(theirs) > max(held)  # it stepped over the held run
