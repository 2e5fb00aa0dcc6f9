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

unchanged("archive/old_helper.py", "# deprecated: use util.load\ndef helper():\n    return None\n")
if (ROOT / "src" / "old_helper.py").exists():
    fail("src/old_helper.py is still there")
unchanged("src/app.py", "from util import load\n\nprint(load())\n")
unchanged("src/util.py", "def load():\n    return 'ok'\n")

print("PASS")
