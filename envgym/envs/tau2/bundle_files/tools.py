"""τ² domains run their tools in τ² itself (envgym/envs/tau2/env.py); this bundle only lists the
tasks.

The descriptor bundle gives ``envgym eval`` and the store task ids and a content hash; its
episodes are built by ``Tau2Env``, never by a sandbox over this file.
"""


def tau2_tools_run_in_tau2() -> str:
    """A placeholder the bundle format requires; τ²'s tools come from the τ² domain."""
    return "see envgym/envs/tau2"
