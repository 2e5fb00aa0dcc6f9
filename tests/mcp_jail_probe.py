"""A stand-in MCP server command that probes its own confinement at start-up (stdlib only).

``python3 mcp_jail_probe.py STATE_DIR [hog]``: writes ``STATE_DIR/probe.json`` with who it runs
as, its capabilities, the pids it sees, which writes succeeded and whether ``/`` could be
remounted writable — the remount last, so that nothing is written after it even where it works.
With ``hog``, forks four children of 100 MiB each and reports how many survived.
"""

import json
import os
import subprocess
import sys
import time

state = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
out = {"uid": os.getuid(), "euid": os.geteuid(), "cwd": os.getcwd()}
with open("/proc/self/status") as status:
    lines = status.read().splitlines()
for line in lines:
    key, _, value = line.partition(":")
    if key in ("CapEff", "CapPrm", "CapInh", "CapAmb", "NoNewPrivs"):
        out[key] = value.strip()
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
out["writes"] = {}
for target in (os.path.join(here, "planted.txt"), os.path.join(state, "ok.txt")):
    try:
        with open(target, "w") as fh:
            fh.write("x")
        out["writes"][target] = "written"
    except OSError as exc:
        out["writes"][target] = exc.strerror
if len(sys.argv) > 2 and sys.argv[2] == "hog":
    kids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            block = bytearray(100 * 1024 * 1024)
            for i in range(0, len(block), 4096):
                block[i] = 1
            time.sleep(2)
            os._exit(0)
        kids.append(pid)
    out["survivors"] = sum(os.waitpid(pid, 0)[1] == 0 for pid in kids)
try:
    done = subprocess.run(
        ["mount", "-o", "remount,rw,bind", "/"], capture_output=True, timeout=10, check=False
    )
    out["remount_rc"] = done.returncode
except OSError as exc:
    out["remount_rc"] = str(exc)
with open(os.path.join(state, "probe.json"), "w") as fh:
    json.dump(out, fh)
