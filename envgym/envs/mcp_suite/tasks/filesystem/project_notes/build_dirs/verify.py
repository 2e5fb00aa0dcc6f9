for rel in ("build/logs", "build/cache"):
    p = ROOT / rel
    if not p.is_dir() or p.is_symlink():
        fail(f"{rel} is not a folder")
    if any(p.iterdir()):
        fail(f"{rel} is not empty")

print("PASS")
