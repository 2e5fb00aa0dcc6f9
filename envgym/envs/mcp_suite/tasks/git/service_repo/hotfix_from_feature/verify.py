if current_branch() != "hotfix":
    fail(f"HEAD is on {current_branch()!r}, not hotfix")
if git("rev-parse", "hotfix") != FEATURE:
    fail("hotfix does not start at feature/login's tip")
if git("rev-parse", "main") != MAIN or git("rev-parse", "feature/login") != FEATURE:
    fail("a branch moved")

print("PASS")
