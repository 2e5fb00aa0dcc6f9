got = rows("SELECT city, total FROM city_sales ORDER BY city")
want = [("Bergen", 54.5), ("Oslo", 49.0)]
if len(got) != len(want) or any(
    g[0] != w[0] or g[1] is None or abs(g[1] - w[1]) > 1e-6 for g, w in zip(got, want)
):
    fail(f"city_sales is {got}")
if table("orders") != ORDERS or table("products") != PRODUCTS or table("customers") != CUSTOMERS:
    fail("other tables changed")

print("PASS")
