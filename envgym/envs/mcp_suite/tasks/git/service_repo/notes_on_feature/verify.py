if current_branch() != "feature/login":
    fail("HEAD is not on feature/login")
if git("rev-parse", "feature/login^") != FEATURE:
    fail("the commit does not sit directly on the old feature/login tip")
if git("log", "-1", "--format=%s", "feature/login") != "notes for login":
    fail("wrong commit message")
if changed("feature/login") != ["notes.txt"]:
    fail(f"the commit changes {changed('feature/login')}")
if git("rev-parse", "main") != MAIN:
    fail("main moved")

print("PASS")
