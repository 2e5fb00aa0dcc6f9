"""A deliberately misbehaving MCP server (stdio, raw JSON-RPC, no SDK) for tests/test_mcp_consume.py.

Tools: ``echo`` answers; ``fail`` answers with ``isError``; ``die`` exits mid-call; ``hang``
never answers; ``pid`` names the process; ``malformed`` answers with a result the protocol does not allow.  Each start
appends a line to the file named by ``$HOSTILE_STARTS`` (tests count restarts with it).
"""

import json
import os
import sys
import time

TOOLS = [
    {
        "name": n,
        "description": d,
        "inputSchema": {"type": "object", "properties": p, "required": list(p)},
    }
    for n, d, p in [
        ("echo", "Echo text back.", {"text": {"type": "string"}}),
        ("fail", "Always fails.", {}),
        ("die", "Exits mid-call.", {}),
        ("hang", "Never answers.", {}),
        ("malformed", "Answers garbage.", {}),
        ("pid", "The server's process id.", {}),
    ]
]


def reply(msg_id, result=None, error=None):
    out = {"jsonrpc": "2.0", "id": msg_id}
    out.update({"error": error} if error else {"result": result})
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def main():
    if os.environ.get("HOSTILE_STARTS"):
        with open(os.environ["HOSTILE_STARTS"], "a") as f:
            f.write("start\n")
    for line in sys.stdin:
        msg = json.loads(line)
        method, msg_id = msg.get("method"), msg.get("id")
        if msg_id is None:
            continue  # a notification
        if method == "initialize":
            reply(
                msg_id,
                {
                    "protocolVersion": msg["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hostile", "version": "0"},
                },
            )
        elif method == "tools/list":
            reply(msg_id, {"tools": TOOLS})
        elif method == "ping":
            reply(msg_id, {})
        elif method == "tools/call":
            name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
            if name == "echo":
                reply(msg_id, {"content": [{"type": "text", "text": args.get("text", "")}]})
            elif name == "fail":
                reply(
                    msg_id,
                    {
                        "content": [{"type": "text", "text": "it failed on purpose"}],
                        "isError": True,
                    },
                )
            elif name == "die":
                os._exit(3)
            elif name == "hang":
                time.sleep(3600)
            elif name == "pid":
                reply(msg_id, {"content": [{"type": "text", "text": str(os.getpid())}]})
            elif name == "malformed":
                reply(msg_id, {"content": "not a list of blocks", "isError": "maybe"})
        else:
            reply(msg_id, error={"code": -32601, "message": "Method not found"})


if __name__ == "__main__":
    main()
