"""The suite bundle's own tool: the agent says it is done; the verifier then checks the state."""


def finish(summary: str) -> str:
    """Say that the task is done. The task is graded on the final state, not on this summary.

    Args:
        summary: one line on what was done.
    """
    return "finished"
