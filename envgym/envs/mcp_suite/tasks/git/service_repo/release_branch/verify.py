if git("rev-parse", "--verify", "refs/heads/release/1.0") != MAIN:
    fail("release/1.0 does not exist or does not point at main's tip")
if current_branch() != "main" or git("rev-parse", "main") != MAIN:
    fail("HEAD must stay on an unchanged main")

print("PASS")
