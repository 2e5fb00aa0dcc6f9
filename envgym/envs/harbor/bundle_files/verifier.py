"""The reward of a Harbor task is its tests/test.sh's /logs/verifier/reward.txt (envgym/envs/harbor/runtime.py)."""


def harbor_reward(submission, task):
    """Never used: HarborEnv runs tests/test.sh in the task's jail and reads the reward file."""
    raise NotImplementedError("Harbor tasks are scored by their tests/test.sh inside HarborEnv")
