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

if text("reports/total.txt").strip() != "565":
    fail("reports/total.txt does not hold the total 565")
unchanged("data/sales_q1.csv", "region,amount\nnorth,120\nsouth,75\neast,310\nwest,42\nnorth,18\n")

print("PASS")
