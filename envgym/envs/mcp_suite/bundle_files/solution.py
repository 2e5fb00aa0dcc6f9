"""The gold solution: the task's MCP tool calls (``metadata.gold``), then ``finish``.

``tools`` must reach the MCP servers' tools, so the suite's sandbox runs this on the host
(``envgym.envs.mcp_suite.suite.SuiteSandbox.solve``); ``{state_dir}`` in an argument is the
episode's state folder.
"""

from envgym.runtime import state_dir


def _bind(value, root):
    if isinstance(value, str):
        return value.replace("{state_dir}", root)
    if isinstance(value, list):
        return [_bind(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _bind(v, root) for k, v in value.items()}
    return value


def solve_gold(tools, task):
    root = str(state_dir())
    for step in task["metadata"]["gold"]:
        getattr(tools, step["tool"])(**_bind(step["arguments"], root))
    tools.finish(summary="done")
