"""envgym: synthesized tool-use environments for agentic RL.

import envgym
env = envgym.make("trip-planning-v0")
obs, info = env.reset(seed=0)
"""

from envgym.bundle import Bundle, BundleError, Task, load_bundle
from envgym.core import Env
from envgym.registry import make, register, register_bundle, spec, specs

__all__ = [
    "Bundle",
    "BundleError",
    "Env",
    "Task",
    "load_bundle",
    "make",
    "register",
    "register_bundle",
    "spec",
    "specs",
]
__version__ = "0.1.0"

# Families register on import so `gymnasium.make("envgym/<id>")` (or "envgym:envgym/<id>") finds
# them; registration is cheap (bundles are built lazily, on first make).
from envgym.registry import discover as _discover  # noqa: E402

_discover()
