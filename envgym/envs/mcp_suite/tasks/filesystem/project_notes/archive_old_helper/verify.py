unchanged("archive/old_helper.py", "# deprecated: use util.load\ndef helper():\n    return None\n")
if (ROOT / "src" / "old_helper.py").exists():
    fail("src/old_helper.py is still there")
unchanged("src/app.py", "from util import load\n\nprint(load())\n")
unchanged("src/util.py", "def load():\n    return 'ok'\n")

print("PASS")
