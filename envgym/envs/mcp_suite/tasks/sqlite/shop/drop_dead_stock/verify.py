if table("products") != [p for p in PRODUCTS if p[0] != 5]:
    fail(f"products are {table('products')}")
if table("orders") != ORDERS or table("customers") != CUSTOMERS:
    fail("other tables changed")

print("PASS")
