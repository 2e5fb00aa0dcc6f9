"""The reward of a τ² task is τ²'s own ``evaluate_simulation`` (envgym/envs/tau2/session.py)."""


def tau2_reward(submission, task):
    """Never used: Tau2Env computes the reward with τ²'s evaluator over the trajectory."""
    raise NotImplementedError("τ² tasks are scored by τ²'s evaluator inside Tau2Env")
