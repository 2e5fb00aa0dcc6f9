"""What "part of the fix" means: one definition for synthesis (validation.py) and ``envgym check``.

A file of the gold patch is **part of the fix** when the gold patch without it no longer earns
reward 1: some FAIL_TO_PASS or PASS_TO_PASS test does not pass.  A file whose removal still passes
every one of them is an **unrelated change** (a cosmetic rename, a drive-by cleanup): an agent that
skips it is rewarded, so ``envgym check``'s ``partial_fix`` exploit would be rewarded too.

Both sides ask the same questions of this module:

* :func:`removable_paths` — which files are tried (the same list for synthesis and check);
* :func:`without_path` — the gold patch with one file's section taken out;
* :func:`still_solves` — the grading rule, applied to one run's outcomes;
* :func:`unrelated_reason` — the named reason, ``unrelated_change[PATH]``.

Synthesis tries each removable file once after the instance is accepted and takes the unrelated
ones out of the gold patch (the instance's base stays the fix commit's parent, so they are simply
not part of the task); check reports a rewarded ``partial_fix`` under the same name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from envgym.envs.swe.patch import FilePatch, changed_files, parse_patch

UNRELATED = "unrelated_change"
MAX_PARTIAL = 3  # files tried per instance (each try is a whole test run)


def _plain(section: FilePatch) -> bool:
    """A section that names one path: a modification, a creation or a deletion (not a rename or
    copy, whose two paths cannot be taken out one at a time as a file section)."""
    return (
        section.old_path is None or section.new_path is None or section.old_path == section.new_path
    )


def removable_paths(patch: str, *, limit: int = MAX_PARTIAL) -> list[str]:
    """The gold patch's files whose removal is tried: Python files of single-path sections, in
    patch order, when the patch changes at least two paths; at most ``limit``."""
    if len(changed_files(patch)) < 2:
        return []
    paths = [s.path for s in parse_patch(patch) if _plain(s) and s.path.endswith(".py")]
    return list(dict.fromkeys(paths))[:limit]


def without_path(patch: str, path: str) -> str:
    """``patch`` without the section of ``path`` (``ValueError`` if it has no such section)."""
    sections = parse_patch(patch)
    kept = [s.text for s in sections if not (_plain(s) and s.path == path)]
    if len(kept) == len(sections):
        raise ValueError(f"the patch has no section for {path!r}")
    return "".join(kept)


def still_solves(
    outcomes: Mapping[str, str], fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]
) -> bool:
    """Grading's rule (envgym/envs/swe/grade.py) on one run: every F2P and P2P test passed."""
    return bool(fail_to_pass) and all(
        outcomes.get(t) == "passed" for t in (*fail_to_pass, *pass_to_pass)
    )


def unrelated_reason(path: str) -> str:
    return (
        f"{UNRELATED}[{path}]: the gold patch without {path} still passes every "
        "FAIL_TO_PASS and PASS_TO_PASS test"
    )
