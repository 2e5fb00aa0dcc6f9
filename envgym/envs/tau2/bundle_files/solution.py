"""Gold behaviour of a τ² task lives in τ²'s task data: ``envgym check tau2/<domain>`` replays it."""


def tau2_gold_actions(task):
    """The gold actions are the task's ``evaluation_criteria.actions``
    (envgym/envs/tau2/oracle.py)."""
    return task["metadata"]["tau2_id"]
