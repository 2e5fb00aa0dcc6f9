cols = [(r[1], r[2].upper(), r[3], r[5]) for r in rows("PRAGMA table_info(reviews)")]
want = [
    ("id", "INTEGER", 0, 1),
    ("product_id", "INTEGER", 1, 0),
    ("rating", "INTEGER", 1, 0),
    ("body", "TEXT", 0, 0),
]
if cols != want:
    fail(f"reviews columns are {cols}")
refs = [(r[2], r[3], r[4]) for r in rows("PRAGMA foreign_key_list(reviews)")]
if refs != [("products", "product_id", "id")]:
    fail(f"reviews foreign keys are {refs}")
if rows("SELECT COUNT(*) FROM reviews") != [(0,)]:
    fail("reviews is not empty")
# the rating rule must be enforced, and only it: 1..5 accepted, 0 and 6 refused (a trigger that
# refuses every insert must not pass); every probe is rolled back
conn = sqlite3.connect(DB)
try:
    for rating in (1, 3, 5):
        try:
            conn.execute(
                "INSERT INTO reviews (product_id, rating, body) VALUES (1, ?, 'x')", (rating,)
            )
        except sqlite3.Error as exc:
            fail(f"a rating of {rating} was refused: {exc}")
        finally:
            conn.rollback()
    for rating in (0, 6):
        try:
            conn.execute(
                "INSERT INTO reviews (product_id, rating, body) VALUES (1, ?, 'x')", (rating,)
            )
        except sqlite3.IntegrityError:
            continue
        finally:
            conn.rollback()
        fail(f"a rating of {rating} was accepted")
finally:
    conn.close()

print("PASS")
