want = [o if o[0] not in (2, 3) else (*o[:4], "cancelled") for o in ORDERS]
if table("orders") != want:
    fail(f"orders are {table('orders')}")
if table("products") != PRODUCTS or table("customers") != CUSTOMERS:
    fail("other tables changed")

print("PASS")
