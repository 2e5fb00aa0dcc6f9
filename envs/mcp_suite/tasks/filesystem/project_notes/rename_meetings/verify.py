import os, sys
from pathlib import Path

ROOT = Path(os.environ["FILESYSTEM_TEST_DIR"])


def fail(why):
    print("FAIL:", why)
    sys.exit(1)


def text(rel):
    p = ROOT / rel
    if not p.is_file() or p.is_symlink():
        fail(f"{rel} is missing (or not a regular file)")
    return p.read_text(encoding="utf-8")


def unchanged(rel, expected):
    if text(rel) != expected:
        fail(f"{rel} was changed")

unchanged("docs/2026-01-10-meeting.md", "# Meeting 2026-01-10\n\n- agreed on the map format\n")
unchanged("docs/2026-02-03-meeting.md", "# Meeting 2026-02-03\n\n- release planned for March\n")
left = sorted(p.name for p in (ROOT / "docs").glob("meeting_*"))
if left:
    fail(f"old names remain: {left}")

print("PASS")
