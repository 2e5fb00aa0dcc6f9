"""Shared by every verify.py of sqlite/shop: envgym prepends it (layout.PRELUDE)."""

import os
import sqlite3
import sys

DB = os.environ["SQLITE_TEST_DB"]


def fail(why):
    print("FAIL:", why)
    sys.exit(1)


def rows(sql, *args):
    try:
        conn = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        fail(f"query failed: {exc}")


PRODUCTS = [
    (1, "Desk Lamp", 24.5, 3),
    (2, "Notebook", 4.0, 120),
    (3, "Pen Set", 12.0, 0),
    (4, "Chair", 89.0, 7),
    (5, "Mug", 9.5, 0),
    (6, "Stapler", 15.0, 12),
]
ORDERS = [
    (1, 1, 1, 1, "shipped"),
    (2, 2, 2, 10, "pending"),
    (3, 2, 4, 1, "pending"),
    (4, 3, 6, 2, "shipped"),
    (5, 2, 1, 2, "shipped"),
    (6, 4, 3, 5, "cancelled"),
    (7, 1, 2, 3, "pending"),
]
CUSTOMERS = [
    (1, "Ann Lee", "Bergen"),
    (2, "Bo Chen", "Oslo"),
    (3, "Cy Diaz", "Bergen"),
    (4, "Eve Ford", "Trondheim"),
]


def table(name):
    return rows(f"SELECT * FROM {name} ORDER BY id")
