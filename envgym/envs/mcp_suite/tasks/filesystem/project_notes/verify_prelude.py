"""Shared by every verify.py of filesystem/project_notes: envgym prepends it (layout.PRELUDE)."""

import os
import sys
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
