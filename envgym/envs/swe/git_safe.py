"""Running git on the host without letting any repository's configuration run a program.

Git runs programs named in configuration: hooks, `filter.<x>.clean/smudge/process`,
`diff.<x>.textconv`, `diff.external`, `core.fsmonitor`, `core.pager`, `core.editor`,
`core.sshCommand`, `core.gitProxy`, `core.askPass`, `credential.helper`, `gpg.program` (with
`log.showSignature`), `core.alternateRefsCommand`, …, and a repository's config can pull in any
other file (`include.path`, `includeIf`).  Two layers keep all of that off the host:

1. **No foreign config is ever read.**  Repositories a user or a model handed in are read through
   a *view* (`envgym/envs/swe/git_source.py`): a bare repository of ours whose only link to the
   source is an alternates line to its object store.  Git reads a repository's config only from the
   git dir it runs in, so the source's `.git/config`, `info/attributes`, hooks and worktree are
   never consulted; its objects are data.
2. **Our own config cannot run programs either.**  No system or global config
   (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`, `GIT_ATTR_NOSYSTEM`), a throwaway
   `HOME`, a protocol allow-list without `ext::`, and `-c` overrides (command-line config wins
   over repository config) for every program-running key that has an inert value.  This guards
   our own repositories — checkouts, scratch dirs, the smith copy — should something we did not
   foresee write to them.  `diff.external` has no inert value (empty fails every diff), so our
   diffs pass ``--no-ext-diff --no-textconv`` instead.

`safe.directory` is not widened: the repositories git runs in are ours (views, checkouts,
scratch dirs) or are named by an explicit `GIT_DIR`, so a repository another user owns is never
trusted for its config — it is only ever read through a view.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

__all__ = ["GIT_TIMEOUT_S", "HARDENING", "GitError", "git", "git_env"]

GIT_TIMEOUT_S = 300.0

# `-c` settings on every git command line.  Command-line config outranks the repository's, so a
# planted `core.fsmonitor=…` or `core.hooksPath=…` loses; keys without an inert value (a
# `filter.<x>` driver, `diff.<x>.textconv`) are kept out by never reading foreign config.
HARDENING: tuple[str, ...] = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.attributesFile=/dev/null",
    "core.pager=cat",
    "core.editor=:",
    "sequence.editor=:",
    "core.askPass=",  # empty: no helper program; prompts are off too (GIT_TERMINAL_PROMPT)
    "credential.helper=",  # empty resets the helper list
    "core.sshCommand=ssh",
    "core.gitProxy=none",
    "gpg.program=false",
    "gpg.ssh.program=false",
    "gpg.x509.program=false",
    "log.showSignature=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "protocol.ext.allow=never",
    "protocol.file.allow=always",  # checkouts fetch from our views over file://
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "gc.auto=0",
    "maintenance.auto=false",
)

_HOME: str | None = None


class GitError(RuntimeError):
    """Git could not do what was asked (no such repository, clone failed, timeout, ...)."""


def _home() -> str:
    global _HOME
    if _HOME is None or not os.path.isdir(_HOME):
        _HOME = tempfile.mkdtemp(prefix="envgym-git-home-")
        atexit.register(_remove_home, _HOME, os.getpid())
    return _HOME


def _remove_home(path: str, pid: int) -> None:
    if os.getpid() == pid:  # not at a forked child's exit: the home is its parent's
        shutil.rmtree(path, ignore_errors=True)


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a git command: nothing inherited but `PATH`."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": _home(),
        "LANG": "C",
        "LC_ALL": "C",  # git's messages in English, for reasons we pass on
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",  # a private URL fails instead of waiting for a password
        "GIT_PAGER": "cat",
        "GIT_EDITOR": ":",
        # file: our views; the network ones for mirrors.  ext:: (runs a command) is not listed.
        "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",  # a source's refs/replace must not rewrite what we read
        "GIT_AUTHOR_NAME": "envgym",
        "GIT_AUTHOR_EMAIL": "envgym@localhost",
        "GIT_COMMITTER_NAME": "envgym",
        "GIT_COMMITTER_EMAIL": "envgym@localhost",
    }
    env.update(extra or {})
    return env


def git(
    args: Sequence[str],
    cwd: str | os.PathLike[str] | None = None,
    *,
    check: bool = True,
    input: str | None = None,
    timeout_s: float = GIT_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``git args`` hardened (see the module docstring); `GitError` on failure if `check`."""
    argv = ["git"]
    for setting in HARDENING:
        argv += ["-c", setting]
    argv += list(args)
    try:
        proc = subprocess.run(
            argv,
            check=False,
            cwd=cwd,
            input=input,
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=timeout_s,
            env=git_env(env),
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args[:2])} timed out after {timeout_s:g} s") from None
    except FileNotFoundError as exc:
        raise GitError(f"cannot run git in {cwd}: {exc.strerror}") from None
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:3])} failed: {proc.stderr.strip()[-2000:]}")
    return proc
