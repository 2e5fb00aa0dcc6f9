"""The subset of a Harbor task's Dockerfile that runs over envgym's jail rootfs, as a plan.

There is no image build: every jail sees the host's system directories read-only (``/usr``,
``/bin``, ``/lib``: a Debian rootfs with its installed packages) and the task's own directories
writable.  A Dockerfile maps onto that when it only needs what the rootfs has:

* ``FROM`` a Debian-family or Python base (``ubuntu``, ``debian``, ``python``, ``buildpack-deps``,
  Terminal-Bench's ``ghcr.io/laude-institute/t-bench/...`` images): the rootfs stands in for it;
* ``RUN apt-get update`` / ``apt-get install [-y] PKG...``: kept only when every package is
  already installed in the rootfs (checked in dpkg's status file), otherwise refused by name;
  ``rm -rf /var/lib/apt/lists/*`` and ``apt-get clean`` are dropped;
* any other ``RUN`` command runs in the jail at build time, without network, over the task's
  writable directories (a ``pip install`` or ``curl`` there fails the build with its output);
* ``WORKDIR``, ``ENV``, ``COPY``/``ADD`` of files from ``environment/`` (no URLs, no ``--from``);
* ``CMD``, ``ENTRYPOINT``, ``LABEL``, ``EXPOSE``, ``USER root``, ``MAINTAINER``: ignored.

Everything else (``ARG``, ``USER`` other than root, heredocs, multi-stage builds, writing into
system directories) is refused with a :class:`DockerfileError` naming the line.
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BuildStep", "DockerfileError", "EnvPlan", "installed_packages", "parse_dockerfile"]

#: Top-level directories that belong to the rootfs (read-only in every jail) or to Harbor
#: itself (/tests, /solution, /logs are mounted by the env): a task may not write there.
SYSTEM_ROOTS = frozenset(
    {
        "usr",
        "bin",
        "sbin",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "etc",
        "proc",
        "sys",
        "dev",
        "run",
        "var",
        "boot",
        "opt",
        "srv",
        "mnt",
        "media",
        "snap",
    }  # fmt: skip
)
RESERVED_ROOTS = frozenset({"tests", "solution", "logs", "tmp"})
_BASES = re.compile(
    r"^(?:docker\.io/)?(?:library/)?(?:ubuntu|debian|python|buildpack-deps)(?::[\w.-]+)?(?:@sha256:[0-9a-f]{64})?$"
    r"|^ghcr\.io/laude-institute/t-bench/[\w.-]+(?::[\w.-]+)?$"
)
_PKG = re.compile(r"^[a-z0-9][a-z0-9+.-]*(?::[a-z0-9]+)?(?:=[\w.:~+-]+)?$")
_DROP = (re.compile(r"^rm -rf /var/lib/apt/lists/?\*?$"), re.compile(r"^apt(?:-get)? clean$"))
_MAX_LINES = 2000


class DockerfileError(ValueError):
    """A Dockerfile the jail rootfs cannot stand in for; names the line and the reason."""


@dataclass(frozen=True)
class BuildStep:
    """``copy`` (``src`` in environment/ → absolute ``dest``), ``mkdir`` or ``run`` (a shell
    command run in the jail with ``cwd`` and ``env``)."""

    kind: str
    line: int
    src: str = ""
    dest: str = ""
    command: str = ""
    cwd: str = "/"
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EnvPlan:
    base: str
    workdir: str
    env: tuple[tuple[str, str], ...]
    steps: tuple[BuildStep, ...]
    roots: tuple[str, ...]  # the writable top-level directories the task uses ("app")
    notes: tuple[str, ...] = field(default=())


@functools.cache
def installed_packages(status: str = "/var/lib/dpkg/status") -> frozenset[str]:
    """Names of the packages dpkg has installed in the rootfs (read, never executed)."""
    names: set[str] = set()
    try:
        text = Path(status).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for stanza in text.split("\n\n"):
        package = re.search(r"^Package: (\S+)", stanza, re.M)
        state = re.search(r"^Status: .* installed$", stanza, re.M)
        if package and state:
            names.add(package.group(1))
    return frozenset(names)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if number > _MAX_LINES:
            raise DockerfileError(f"more than {_MAX_LINES} lines")
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, (buf + line).strip()))
        buf = ""
    if buf:
        out.append((start, buf.strip()))
    return out


def _absolute(path: str, cwd: str, line: int) -> str:
    if "\0" in path or "$" in path:
        raise DockerfileError(f"line {line}: path {path!r}: variables and NUL are not supported")
    full = posixpath.normpath(posixpath.join(cwd, path))
    return "/" + full.lstrip("/")


def _root_of(path: str, line: int) -> str:
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise DockerfileError(f"line {line}: cannot write to / itself")
    top = parts[0]
    if top in SYSTEM_ROOTS or top in RESERVED_ROOTS:
        raise DockerfileError(
            f"line {line}: {path} is under /{top}, which belongs to the rootfs or to Harbor "
            "(the jail's system directories are read-only)"
        )
    return top


def _apt(segment: str, line: int) -> bool:
    """True when ``segment`` is an apt-get step (checked); False when it is some other command."""
    if segment.split()[:1] not in (["apt-get"], ["apt"]):
        return False
    try:
        words = shlex.split(segment)
    except ValueError:
        raise DockerfileError(f"line {line}: {segment!r}: unbalanced quotes") from None
    if words[1:2] == ["update"] or words[1:] == ["clean"]:
        return True
    if words[1:2] != ["install"]:
        raise DockerfileError(
            f"line {line}: {segment!r}: only apt-get update/install/clean are supported"
        )
    have = installed_packages()
    missing = []
    for word in words[2:]:
        if word.startswith("-"):
            continue
        if not _PKG.match(word):
            raise DockerfileError(f"line {line}: {word!r} is not a package name")
        if word.split("=")[0].split(":")[0] not in have:
            missing.append(word)
    if missing:
        raise DockerfileError(
            f"line {line}: apt-get install of packages the rootfs lacks: {', '.join(missing)} "
            "(there is no image build; install them on the host or pick another task)"
        )
    return True


def parse_dockerfile(text: str, *, workdir_override: str | None = None) -> EnvPlan:
    """The build plan of ``text`` (see the module docstring); ``workdir_override`` is task.toml's
    ``[environment].workdir``."""
    if "\0" in text:
        raise DockerfileError("contains NUL")
    base = ""
    cwd = "/"
    env: dict[str, str] = {}
    steps: list[BuildStep] = []
    roots: set[str] = set()
    notes: list[str] = []
    for line, content in _logical_lines(text):
        word, _, rest = content.partition(" ")
        op, rest = word.upper(), rest.strip()
        if "<<" in rest and op in ("RUN", "COPY", "ADD"):
            raise DockerfileError(f"line {line}: heredocs are not supported")
        if op == "FROM":
            if base:
                raise DockerfileError(
                    f"line {line}: multi-stage builds (a second FROM) are not supported"
                )
            image = rest.split()[0] if rest.split() else ""
            if rest.split()[1:] or not _BASES.match(image):
                raise DockerfileError(
                    f"line {line}: FROM {rest!r}: the jail's Debian rootfs stands in only for "
                    "ubuntu, debian, python, buildpack-deps and t-bench bases"
                )
            base = image
        elif not base:
            raise DockerfileError(f"line {line}: {op} before FROM")
        elif op == "WORKDIR":
            cwd = _absolute(rest, cwd, line)
            roots.add(_root_of(cwd, line))
            steps.append(BuildStep("mkdir", line, dest=cwd))
        elif op == "ENV":
            pairs = shlex.split(rest)
            if len(pairs) == 2 and "=" not in pairs[0]:
                pairs = [f"{pairs[0]}={pairs[1]}"]
            for pair in pairs:
                key, eq, value = pair.partition("=")
                if not eq or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key) or "$" in value:
                    raise DockerfileError(
                        f"line {line}: ENV {pair!r}: only NAME=value without variables"
                    )
                env[key] = value
        elif op in ("COPY", "ADD"):
            words = shlex.split(rest)
            flags = [w for w in words if w.startswith("--")]
            if any(not f.startswith("--chown=") for f in flags):
                raise DockerfileError(
                    f"line {line}: {op} {' '.join(flags)}: only --chown is accepted (ignored)"
                )
            words = [w for w in words if not w.startswith("--")]
            if len(words) < 2:
                raise DockerfileError(f"line {line}: {op} needs a source and a destination")
            *sources, dest_word = words
            dest = _absolute(dest_word, cwd, line)
            roots.add(_root_of(dest, line))
            for src in sources:
                if (
                    "://" in src
                    or src.startswith("/")
                    or ".." in src.split("/")
                    or any(c in src for c in "*?[")
                ):
                    raise DockerfileError(
                        f"line {line}: {op} {src!r}: only plain paths inside environment/"
                    )
                into = dest_word.endswith("/") or len(sources) > 1
                steps.append(
                    BuildStep(
                        "copy", line, src=posixpath.normpath(src), dest=dest + ("/" if into else "")
                    )
                )
        elif op == "RUN":
            if rest.startswith("["):
                raise DockerfileError(f"line {line}: the JSON form of RUN is not supported")
            kept = []
            for segment in (s.strip() for s in rest.split("&&")):
                if any(p.match(segment) for p in _DROP) or _apt(segment, line):
                    continue
                kept.append(segment)
            if kept:
                steps.append(
                    BuildStep(
                        "run", line, command=" && ".join(kept), cwd=cwd, env=tuple(env.items())
                    )
                )
        elif op == "USER":
            if rest not in ("root", "0"):
                raise DockerfileError(
                    f"line {line}: USER {rest}: only root (the jail drops to its own uid anyway)"
                )
        elif op in (
            "CMD",
            "ENTRYPOINT",
            "LABEL",
            "EXPOSE",
            "MAINTAINER",
            "STOPSIGNAL",
            "HEALTHCHECK",
            "SHELL",
        ):
            notes.append(f"line {line}: {op} ignored")
        else:
            raise DockerfileError(f"line {line}: {op} is not supported")
    if not base:
        raise DockerfileError("no FROM line")
    if workdir_override is not None:
        cwd = _absolute(workdir_override, "/", 0)
        roots.add(_root_of(cwd, 0))
        steps.append(BuildStep("mkdir", 0, dest=cwd))
    if cwd == "/":
        cwd = "/app"  # Harbor tasks expect some working directory; / is read-only here
        roots.add("app")
        steps.append(BuildStep("mkdir", 0, dest=cwd))
        notes.append("no WORKDIR: /app is used")
    return EnvPlan(base, cwd, tuple(env.items()), tuple(steps), tuple(sorted(roots)), tuple(notes))
