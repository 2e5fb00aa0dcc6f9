"""A Harbor task's Dockerfile rewritten for the local engine, and its image built offline.

The Docker backend builds the task's own ``environment/Dockerfile`` (unlike the bwrap backend,
which maps a subset onto the jail rootfs), but never pulls: every image a build could fetch is
checked first.

* ``FROM IMAGE``: kept when the engine already holds ``IMAGE`` (e.g. one the user ``docker tag``ged);
  else a Debian-family or Python base (``ubuntu``, ``debian``, ``python``, ``buildpack-deps``,
  Terminal-Bench's ``ghcr.io/laude-institute/t-bench/*``) is replaced by the project's local
  debootstrapped image (``envgym-sandbox:latest``, scripts/docker_setup.sh); anything else is
  refused, naming it.  One stage only; no variables in FROM; no ``ARG`` before it.
* ``COPY --from``, ``ADD URL`` / git sources, ``ONBUILD``, heredocs and ``RUN --flags``
  (BuildKit mounts and network modes) are refused: each could reach outside the build context.
* ``RUN apt-get update`` / ``apt-get clean`` / ``rm -rf /var/lib/apt/lists/*`` are dropped and
  ``apt-get install PKG...`` is kept only when the base already has every package (asked of the
  base image's dpkg); the build has no network, so anything else would fail later, less clearly.
* Every other instruction is kept verbatim: the build runs in the engine, not on the host, with
  ``network_mode=none`` and the task's memory limit.

The only text written into the Dockerfile that is not the task's own is the FROM image (a name
validated here) and, when the task names a working directory in task.toml, a ``WORKDIR``
(a validated absolute path).
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import shlex
import tarfile
from collections.abc import Callable
from dataclasses import dataclass

from envgym.envs.harbor.dockerfile import _BASES, _DROP, _PKG, DockerfileError, _logical_lines
from envgym.envs.harbor.task import HarborTask

__all__ = ["DockerBuild", "build_context", "rewrite_dockerfile"]

LOCAL_BASE = "envgym-sandbox:latest"  # scripts/docker_setup.sh: debootstrapped bookworm + python3
_IMAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9._/:@-]{0,255}$")
_PATH = re.compile(r"^/[A-Za-z0-9._/+-]{0,255}$")
_KEPT = frozenset(
    {
        "RUN",
        "WORKDIR",
        "ENV",
        "COPY",
        "ADD",
        "USER",
        "ARG",
        "LABEL",
        "EXPOSE",
        "CMD",
        "ENTRYPOINT",
        "MAINTAINER",
        "STOPSIGNAL",
        "HEALTHCHECK",
        "SHELL",
        "VOLUME",
    }  # fmt: skip
)


@dataclass(frozen=True)
class DockerBuild:
    dockerfile: str  # the text the engine builds
    base: str  # the task's FROM
    image: str  # the local image that stands in for it
    workdir: str  # the working directory of the agent's commands
    notes: tuple[str, ...]


def _from(rest: str, line: int, available: Callable[[str], bool]) -> tuple[str, str]:
    words = rest.split()
    if not words or len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS"):
        raise DockerfileError(f"line {line}: FROM {rest!r}: expected FROM IMAGE [AS NAME]")
    image = words[0]
    if words[0].startswith("--") or not _IMAGE_NAME.fullmatch(image):
        raise DockerfileError(
            f"line {line}: FROM {image!r}: not a plain image name (no variables or flags)"
        )
    if available(image):
        return image, image
    if _BASES.match(image):
        if not available(LOCAL_BASE):
            raise DockerfileError(
                f"line {line}: FROM {image}: the local image {LOCAL_BASE} that stands in for it is "
                "not in the engine (run scripts/docker_setup.sh)"
            )
        return image, LOCAL_BASE
    raise DockerfileError(
        f"line {line}: FROM {image}: not available in the local engine, and no local image stands "
        f"in for it (images are never pulled; `docker tag` a local image as {image} to use it)"
    )


def _run(rest: str, line: int, packages: Callable[[], frozenset[str]]) -> str | None:
    """The RUN line without its apt bookkeeping (None: nothing is left to run)."""
    if rest.startswith("--"):
        raise DockerfileError(f"line {line}: RUN {rest.split()[0]}: RUN flags are not supported")
    if rest.startswith("["):
        return rest  # JSON form: kept as written
    segments = [s.strip() for s in rest.split("&&")]
    kept = []
    for segment in segments:
        if any(p.match(segment) for p in _DROP):
            continue
        if segment.split()[:1] in (["apt-get"], ["apt"]):
            try:
                words = shlex.split(segment)
            except ValueError:
                raise DockerfileError(f"line {line}: {segment!r}: unbalanced quotes") from None
            if words[1:2] == ["update"]:
                continue
            if words[1:2] == ["install"]:
                names = [w for w in words[2:] if not w.startswith("-")]
                bad = [w for w in names if not _PKG.match(w)]
                if bad:
                    raise DockerfileError(f"line {line}: {bad[0]!r} is not a package name")
                have = packages()
                missing = [w for w in names if w.split("=")[0].split(":")[0] not in have]
                if missing:
                    raise DockerfileError(
                        f"line {line}: apt-get install of packages the local base image lacks: "
                        f"{', '.join(missing)} (the build has no network)"
                    )
                continue
        kept.append(segment)
    if len(kept) == len(segments):
        return rest
    return " && ".join(kept) or None


def rewrite_dockerfile(
    text: str,
    *,
    available: Callable[[str], bool],
    packages: Callable[[str], frozenset[str]],
    workdir_override: str | None = None,
) -> DockerBuild:
    """The Dockerfile the engine builds for ``text`` (see the module docstring).

    ``available(image)``: whether the engine holds the image; ``packages(image)``: the names
    dpkg has installed in it (asked only when an apt-get install needs checking)."""
    if "\0" in text:
        raise DockerfileError("contains NUL")
    out: list[str] = []
    base = image = ""
    workdir = "/"
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
            base, image = _from(rest, line, available)
            out.append(f"FROM {image}")
            if image != base:
                notes.append(f"FROM {base}: built on the local {image}")
            continue
        if not base:
            raise DockerfileError(f"line {line}: {op} before FROM")
        if op not in _KEPT:
            raise DockerfileError(f"line {line}: {op} is not supported")
        if op in ("COPY", "ADD"):
            words = rest.split()
            if any(w.startswith("--from") for w in words):
                raise DockerfileError(
                    f"line {line}: {op} --from: only files of environment/ can be copied"
                )
            if any("://" in w or w.startswith("git@") for w in words):
                raise DockerfileError(f"line {line}: {op} of a URL: the build has no network")
        elif op == "RUN":
            kept = _run(rest, line, functools.partial(packages, image))
            if kept is None:
                notes.append(f"line {line}: apt bookkeeping dropped")
                continue
            rest = kept
        elif op == "WORKDIR":
            if "$" in rest:
                raise DockerfileError(f"line {line}: WORKDIR {rest!r}: variables are not supported")
            workdir = rest if rest.startswith("/") else workdir.rstrip("/") + "/" + rest
        out.append(f"{op} {rest}")
    if not base:
        raise DockerfileError("no FROM line")
    if workdir_override is not None:
        workdir = workdir_override
    if workdir == "/":
        workdir = "/app"  # as on bwrap: Harbor tasks expect some working directory
    if not _PATH.fullmatch(workdir) or ".." in workdir.split("/"):
        raise DockerfileError(f"working directory {workdir!r}: only a plain absolute path")
    out.append(f"WORKDIR {workdir}")
    return DockerBuild("\n".join(out) + "\n", base, image, workdir, tuple(notes))


def build_context(task: HarborTask, dockerfile: str) -> tuple[bytes, str]:
    """The build context (a tar of environment/ with the rewritten Dockerfile) and its digest,
    which names the image: an unchanged task is not built twice."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        entries: list[tuple[str, bytes | None, int]] = [("Dockerfile", dockerfile.encode(), 0o644)]
        entries += [(rel, None, 0o755) for rel in sorted(task.environment.dirs)]
        entries += [(rel, data, mode & 0o755 | 0o644) for rel, (data, mode) in sorted(task.environment.files.items())
                    if rel != "Dockerfile"]  # fmt: skip
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = mode, 0
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return raw, hashlib.sha256(raw).hexdigest()
