names = [line.strip() for line in text("docs/index.md").splitlines() if line.strip()]
want = ["design.md", "meeting_2026-01-10.md", "meeting_2026-02-03.md"]
if names != want:
    fail(f"docs/index.md lists {names}, expected {want}")

print("PASS")
