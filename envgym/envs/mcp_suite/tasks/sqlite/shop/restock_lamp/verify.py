want = [(1, "Desk Lamp", 24.5, 50)] + PRODUCTS[1:]
if table("products") != want:
    fail(f"products are {table('products')}")
if table("orders") != ORDERS or table("customers") != CUSTOMERS:
    fail("other tables changed")

print("PASS")
