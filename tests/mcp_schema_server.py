"""An MCP server (stdio, raw JSON-RPC, no SDK) whose tools carry hostile schemas, for
tests/test_mcp_hostile_schemas.py.

``$SCHEMA_TOOLS`` holds the tools as JSON: ``[{"name", "inputSchema", "outputSchema"?,
"structured"?}]``.  A call answers its arguments as text, plus ``structured`` as the result's
``structuredContent`` when the tool has one.
"""

import json
import os
import sys

TOOLS = json.loads(os.environ["SCHEMA_TOOLS"])


def reply(msg_id, result=None, error=None):
    out = {"jsonrpc": "2.0", "id": msg_id}
    out.update({"error": error} if error else {"result": result})
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def listing():
    keys = ("name", "inputSchema", "outputSchema")
    return [{"description": "a tool", **{k: t[k] for k in keys if k in t}} for t in TOOLS]


def main():
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
                    "serverInfo": {"name": "schemas", "version": "0"},
                },
            )
        elif method == "tools/list":
            reply(msg_id, {"tools": listing()})
        elif method == "ping":
            reply(msg_id, {})
        elif method == "tools/call":
            name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
            tool = next((t for t in TOOLS if t["name"] == name), {})
            result = {"content": [{"type": "text", "text": json.dumps(args, sort_keys=True)}]}
            if "structured" in tool:
                result["structuredContent"] = tool["structured"]
            reply(msg_id, result)
        else:
            reply(msg_id, error={"code": -32601, "message": "Method not found"})


if __name__ == "__main__":
    main()
