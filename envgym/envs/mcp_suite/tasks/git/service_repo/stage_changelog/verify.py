if git("rev-parse", "HEAD") != MAIN or current_branch() != "main":
    fail("something was committed or HEAD moved")
if staged() != ["CHANGELOG.md"]:
    fail(f"staged files are {staged()}, expected only CHANGELOG.md")
if untracked() != ["notes.txt"]:
    fail("notes.txt must stay untracked")

print("PASS")
