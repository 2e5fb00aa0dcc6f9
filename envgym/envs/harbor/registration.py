"""Registers the ``harbor:PATH`` scheme and ``envgym check harbor:PATH`` (the ``envgym.envs`` entry point).

``envgym.make("harbor:PATH")`` builds a :class:`envgym.envs.harbor.env.HarborEnv` over a Harbor task
directory or a dataset directory of them; ``envgym eval harbor:PATH`` lists its tasks through the
descriptor bundle (envgym/envs/harbor/descriptor.py); ``envgym check harbor:PATH`` runs check.py.
See docs/HARBOR.md.
"""

from __future__ import annotations

import functools
from typing import Any

from envgym.core import Env
from envgym.registry import EnvSpec, register_check, register_scheme

SCHEME = "harbor"


def _make(path: str, **kwargs: Any) -> Env:
    from envgym.envs.harbor.env import HarborEnv

    return HarborEnv(path, **kwargs)


def _bundle_dir(path: str) -> Any:
    from envgym.envs.harbor.descriptor import bundle_dir

    return bundle_dir(path)


def resolve(path: str) -> EnvSpec:
    """The spec of ``harbor:PATH`` (built per target: PATH is the user's, not a registered id)."""
    if not path:
        raise KeyError("harbor: needs a path: harbor:PATH (a task or dataset directory)")
    return EnvSpec(f"{SCHEME}:{path}", functools.partial(_make, path), description="Harbor task(s) at " + path,
                   bundle_dir=functools.partial(_bundle_dir, path))  # fmt: skip


def _claims(target: str) -> bool:
    return str(target).startswith(f"{SCHEME}:")


def _check(target: str, **kwargs: Any) -> int:
    from envgym.envs.harbor.check import harbor_check_main

    return harbor_check_main(target.removeprefix(f"{SCHEME}:"), **kwargs)


def register_envs() -> None:
    register_scheme(SCHEME, resolve)
    register_check(SCHEME, _claims, _check, options=("sandbox",))
