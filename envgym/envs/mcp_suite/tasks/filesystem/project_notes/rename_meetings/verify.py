unchanged("docs/2026-01-10-meeting.md", "# Meeting 2026-01-10\n\n- agreed on the map format\n")
unchanged("docs/2026-02-03-meeting.md", "# Meeting 2026-02-03\n\n- release planned for March\n")
left = sorted(p.name for p in (ROOT / "docs").glob("meeting_*"))
if left:
    fail(f"old names remain: {left}")

print("PASS")
