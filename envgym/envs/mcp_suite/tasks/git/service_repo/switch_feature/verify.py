if current_branch() != "feature/login":
    fail(f"HEAD is on {current_branch()!r}, not feature/login")
if git("rev-parse", "feature/login") != FEATURE or git("rev-parse", "main") != MAIN:
    fail("a branch moved")
if untracked() != ["CHANGELOG.md", "notes.txt"]:
    fail("the untracked files were lost")

print("PASS")
