if current_branch() != "main" or git("rev-parse", "main^") != MAIN:
    fail("expected one new commit on top of main")
if git("log", "-1", "--format=%s", "main") != "docs: notes and changelog":
    fail("wrong commit message")
if changed("main") != ["CHANGELOG.md", "notes.txt"]:
    fail(f"the commit changes {changed('main')}")
if untracked() or staged():
    fail("files left untracked or staged")

print("PASS")
