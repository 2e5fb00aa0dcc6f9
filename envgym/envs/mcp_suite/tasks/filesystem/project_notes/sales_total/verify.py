if text("reports/total.txt").strip() != "565":
    fail("reports/total.txt does not hold the total 565")
unchanged("data/sales_q1.csv", "region,amount\nnorth,120\nsouth,75\neast,310\nwest,42\nnorth,18\n")

print("PASS")
