"""What one ``envs`` entry of a training config stands for: ``(id, tasks)`` per environment.

* an environment id or a bundle directory stands for itself (with its ``tasks``, if given);
* a suite stands for the bundles of one split (default ``train``), in the manifest's order;
* with a kept-tasks file (``kept``, written by ``envgym filter``; envgym/kept_tasks.py) each of
  those bundles keeps only the tasks the file kept for it, a bundle kept nothing of is left out,
  and a bundle the file does not know (changed since the filter ran, or never filtered) is
  refused: training unfiltered on it would be a silent change of the experiment.

Errors are :class:`EntryError` s whose text continues ``envs[i]``.
"""

from __future__ import annotations

from pathlib import Path

EnvEntry = tuple[str, list[str] | None]  # (environment id or bundle directory, tasks or all)


class EntryError(ValueError):
    """The entry cannot be expanded; its text follows ``envs[i]`` in the message."""


def bundles_of(
    target: str, split: str | None, tasks: list[str] | None, kept: str | None
) -> list[EnvEntry]:
    from envgym.suite_manifest import SuiteError, split_dirs

    try:
        dirs = split_dirs(target, split, "train")
    except SuiteError as err:
        raise EntryError(f" ({target!r}, split {split!r}): {err}") from None
    if kept is not None:
        if tasks is not None:
            raise EntryError(": 'tasks' and 'kept' both choose tasks; give one")
        if dirs is None and not Path(target).is_dir():
            raise EntryError(f".kept needs a bundle directory or a suite, not {target!r}")
        return _kept(dirs if dirs is not None else [Path(target)], kept, target)
    if dirs is None:
        return [(target, tasks)]
    if tasks is not None:
        raise EntryError(f".tasks cannot restrict a suite ({target!r}): pick a split or 'kept'")
    return [(str(d), None) for d in dirs]


def _kept(dirs: list[Path], kept_path: str, target: str) -> list[EnvEntry]:
    from envgym.bundle import BundleError, load_bundle
    from envgym.kept_tasks import KeptError, load_kept

    try:
        kept = load_kept(kept_path)
    except KeptError as err:
        raise EntryError(f".kept: {err}") from None
    out: list[EnvEntry] = []
    for d in dirs:
        try:
            digest = load_bundle(d).manifest.content_hash
        except BundleError as err:
            raise EntryError(f": the bundle {d}: {err}") from None
        entry = kept.bundles.get(digest)
        if entry is None:
            raise EntryError(
                f".kept: the bundle {d} ({digest}) is not in {kept_path}: it changed since the "
                "filter ran, or that file filtered other bundles (run envgym filter on it)"
            )
        if entry.kept:
            out.append((str(d), list(entry.kept)))
    if not out:
        raise EntryError(f".kept: {kept_path} keeps no task of {target!r}")
    return out
