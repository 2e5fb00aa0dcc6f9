"""Gold behaviour of a Harbor task is its solution/solve.sh: ``envgym check harbor:PATH`` runs it."""


def harbor_solve_sh(task):
    """The oracle is the task directory's solution/solve.sh (envgym/envs/harbor/check.py)."""
    return task["metadata"]["harbor_id"]
