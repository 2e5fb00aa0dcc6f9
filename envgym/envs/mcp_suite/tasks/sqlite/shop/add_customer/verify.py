got = table("customers")
if got[:4] != CUSTOMERS or len(got) != 5 or got[4][1:] != ("Dana Kim", "Oslo"):
    fail(f"customers are {got}")
if table("orders") != ORDERS or table("products") != PRODUCTS:
    fail("other tables changed")

print("PASS")
