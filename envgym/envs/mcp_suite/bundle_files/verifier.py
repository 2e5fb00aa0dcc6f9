"""Runs a task's MCPMark ``verify.py`` against the episode's final state (stdlib only).

The script's source comes from the task (``metadata.verify_py``, read when the suite was built),
is written to a fresh private folder and run there with ``python -I`` (no current folder or
``PYTHON*`` variables on its path, so nothing in the episode state can be imported into it), with
a timeout.  Its exit code is the verdict (0: solved), as in MCPMark.  A timeout or a death by
signal raises: a broken verifier is an error, never a rejection.
"""

import os
import subprocess
import sys
import tempfile

from envgym.runtime import state_dir

VERIFY_TIMEOUT_S = 60


def verify_task(submission, task):
    meta = task["metadata"]
    variable, sub = meta["state_env"]
    target = state_dir() / sub if sub else state_dir()
    with tempfile.TemporaryDirectory(prefix="envgym-verify-") as folder:
        script = os.path.join(folder, "verify.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(meta["verify_py"])
        with open(os.path.join(folder, "meta.json"), "w", encoding="utf-8") as f:
            f.write(meta["meta_json"])
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": folder,
            "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            variable: str(target),
            # the state may belong to another user than the verifier's (bwrap, MCP servers)
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "safe.directory",
            "GIT_CONFIG_VALUE_0": "*",
        }
        try:
            done = subprocess.run(
                [sys.executable, "-I", script],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=VERIFY_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"verify.py did not finish within {VERIFY_TIMEOUT_S}s") from None
    if done.returncode < 0:
        raise RuntimeError(f"verify.py was killed by signal {-done.returncode}")
    said = (done.stdout + done.stderr).strip().splitlines()
    detail = " | ".join(said[-5:])[:1000]
    return {
        "checks": [
            {
                "name": "verify.py",
                "passed": done.returncode == 0,
                "detail": f"exit {done.returncode}: {detail}",
            }
        ]
    }
