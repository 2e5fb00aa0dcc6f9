"""Harbor tasks run their tools in the task's jail (envgym/envs/harbor/agent_tools.py); this bundle only lists the tasks.

The descriptor bundle gives ``envgym eval`` and the store task ids and a content hash; its
episodes are built by ``HarborEnv``, never by a sandbox over this file.
"""


def harbor_tools_run_in_the_task_jail() -> str:
    """A placeholder the bundle format requires; the tools are bash, read_file, write_file, submit."""
    return "see envgym/envs/harbor"
