if current_branch() != "main":
    fail("HEAD is not on main")
if git("log", "-1", "--format=%s", "main") != "add notes":
    fail("main's last commit message is not 'add notes'")
if git("rev-parse", "main^") != MAIN:
    fail("the new commit does not sit directly on the old main")
if changed("main") != ["notes.txt"]:
    fail(f"the commit changes {changed('main')}, not only notes.txt")
if untracked() != ["CHANGELOG.md"] or staged():
    fail("CHANGELOG.md must stay untracked and nothing else staged")

print("PASS")
