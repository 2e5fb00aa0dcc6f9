got = table("products")
want = [
    (1, "Desk Lamp", 24.5, 3),
    (2, "Notebook", 4.4, 120),
    (3, "Pen Set", 12.0, 0),
    (4, "Chair", 89.0, 7),
    (5, "Mug", 10.45, 0),
    (6, "Stapler", 15.0, 12),
]
if len(got) != 6 or any(
    g[:2] != w[:2] or g[3] != w[3] or abs(g[2] - w[2]) > 1e-9 for g, w in zip(got, want)
):
    fail(f"products are {got}")
if table("orders") != ORDERS or table("customers") != CUSTOMERS:
    fail("other tables changed")

print("PASS")
