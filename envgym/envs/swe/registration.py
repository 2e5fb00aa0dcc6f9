"""Registers ``swe-v0`` (loaded through the ``envgym.envs`` entry point).

``envgym.make("swe-v0", instance=...)`` takes a ``SweInstance``, a SWE-bench record or a JSONL
path (``index=`` or ``"path#index"``); see envgym/envs/swe/env.py and docs/SWE.md.  ``envgym check
swe:PATH`` (or a bare instances file / Harbor export) runs envgym/envs/swe/check.py.
"""

from __future__ import annotations

from typing import Any

from envgym.core import Env
from envgym.keywords import env_keywords, refuse_unknown
from envgym.registry import register, register_check


def _make(**kwargs: Any) -> Env:
    from envgym.envs.swe.env import SweEnv

    # a misspelled keyword is named first, before the instance is looked for or loaded
    refuse_unknown(kwargs, env_keywords(SweEnv, extra=("sandbox", "limits")), where="swe-v0")
    if "instance" not in kwargs:
        raise TypeError(
            "swe-v0 needs instance=: a SweInstance, a SWE-bench record, or a JSONL path"
        )
    return SweEnv(**kwargs)


def _claims(target: str) -> bool:
    from envgym.envs.swe.check_cli import claims

    return claims(target)


def _check(target: str, **kwargs: Any) -> int:
    from envgym.envs.swe.check_cli import swe_check_main

    return swe_check_main(target, **kwargs)


def register_envs() -> None:
    register_check("swe", _claims, _check, options=("sandbox", "reruns"))
    register("swe-v0", _make, override=True,
             description="Fix an issue in a real Python repository (bash, view, search, str_replace, create, "
                         "run_tests, submit); rewarded by the instance's hidden FAIL_TO_PASS / PASS_TO_PASS tests.")  # fmt: skip
