"""``envgym.make`` / ``envgym.register``: versioned ids, bundle paths, entry-point discovery.

Families register themselves from the ``envgym.envs`` entry-point group (a callable taking no
arguments that calls :func:`register`), so the core never imports a family and third-party
packages add environments by declaring an entry point.  A family whose tasks are not bundles
(τ², the MCP suite, SWE instances) also registers how ``envgym check`` checks them
(:func:`register_check`).  Every id is mirrored into gymnasium's
registry as ``envgym/<id>``.
"""

from __future__ import annotations

import difflib
import functools
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import gymnasium

from envgym.core import Env

ENTRY_POINT_GROUP = "envgym.envs"
#: What gymnasium's mirror of every id calls (``make`` by its import path).
GYM_ENTRY_POINT = "envgym.registry:make"
_ID = re.compile(r"^(?P<name>[a-z0-9][a-z0-9_-]*?)-v(?P<version>\d+)$")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnvSpec:
    """How to build one registered environment."""

    id: str
    entry_point: Callable[..., Env]
    description: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    bundle_dir: Callable[[], Path] | None = None  # set for bundle-backed environments

    @property
    def name(self) -> str:
        return _parse_id(self.id)[0]

    @property
    def version(self) -> int:
        return _parse_id(self.id)[1]


@dataclass(frozen=True)
class CheckHandler:
    """How ``envgym check TARGET`` checks a family whose tasks are not bundles.

    ``matches(target)`` claims a target (``tau2/airline``, ``mcp-suite/git``, an instances file);
    ``run(target, as_json=..., console=...)`` checks it, prints its report and returns the exit
    code (0: every task passes); ``options`` names the ``envgym check`` options it also takes
    (``sandbox``, ``reruns``), passed as keywords of the same names.
    """

    name: str
    matches: Callable[[str], bool]
    run: Callable[..., int]
    options: tuple[str, ...] = ()


_registry: dict[str, EnvSpec] = {}
_checks: dict[str, CheckHandler] = {}
_schemes: dict[str, Callable[[str], EnvSpec]] = {}
_discovered = False


def _parse_id(env_id: str) -> tuple[str, int]:
    match = _ID.match(env_id)
    if match is None:
        raise ValueError(
            f"environment id {env_id!r} must look like 'name-v0' (lowercase, versioned)"
        )
    return match["name"], int(match["version"])


def register(
    env_id: str,
    entry_point: Callable[..., Env],
    *,
    description: str = "",
    kwargs: Mapping[str, Any] | None = None,
    override: bool = False,
    bundle_dir: Callable[[], Path] | None = None,
) -> EnvSpec:
    """Register an environment under a versioned id such as ``trip-planning-v0``."""
    _parse_id(env_id)
    if env_id in _registry and not override:
        raise ValueError(f"environment {env_id!r} is already registered (pass override=True)")
    spec = EnvSpec(env_id, entry_point, description, dict(kwargs or {}), bundle_dir)
    _registry[env_id] = spec
    gym_id = f"envgym/{env_id}"
    gymnasium.registry.pop(gym_id, None)
    # An importable entry point plus JSON kwargs, so gymnasium's spec serializes (to_json) and
    # "envgym:envgym/<id>" rebuilds it in a process that never imported envgym.
    gymnasium.register(
        id=gym_id,
        entry_point=GYM_ENTRY_POINT,
        kwargs={"env_id": env_id},
        disable_env_checker=True,
        order_enforce=False,
    )
    return spec


def register_bundle(
    env_id: str,
    bundle_dir: Callable[[], Path],
    *,
    description: str = "",
    kwargs: Mapping[str, Any] | None = None,
    override: bool = False,
) -> EnvSpec:
    """Register a bundle-backed environment; ``bundle_dir`` builds or finds the bundle lazily."""

    def entry_point(**kw: Any) -> Env:
        from envgym.bundle_env import BundleEnv

        return BundleEnv(bundle_dir(), **kw)

    return register(
        env_id,
        entry_point,
        description=description,
        kwargs=kwargs,
        override=override,
        bundle_dir=bundle_dir,
    )


def register_check(
    name: str,
    matches: Callable[[str], bool],
    run: Callable[..., int],
    *,
    options: tuple[str, ...] = (),
) -> CheckHandler:
    """Register a family's own ``envgym check`` (the name identifies it; registering again replaces)."""
    handler = CheckHandler(name, matches, run, tuple(options))
    _checks[name] = handler
    return handler


def register_scheme(scheme: str, resolve: Callable[[str], EnvSpec]) -> None:
    """Targets spelled ``SCHEME:REST`` (``harbor:PATH``) resolve to ``resolve(REST)``: a family
    whose environments are named by a user's path rather than a registered id."""
    _schemes[scheme] = resolve


def check_handler(target: str) -> CheckHandler | None:
    """The registered family check that claims ``target``, or None (then it is a bundle)."""
    discover()
    claimed = [h for h in _checks.values() if h.matches(str(target))]
    if len(claimed) > 1:  # two families claiming one target is a plugin bug, not a user error
        raise ValueError(
            f"{target!r} is claimed by several checks: {', '.join(h.name for h in claimed)}"
        )
    return claimed[0] if claimed else None


def resolve_bundle(id_or_path: str | Path) -> Path:
    """The bundle directory behind a path or a bundle-backed environment id."""
    path = Path(id_or_path)
    if (path / "manifest.json").is_file():
        return path
    found = spec(str(id_or_path))
    if found.bundle_dir is None:
        raise ValueError(f"environment {found.id!r} is not backed by a bundle")
    return found.bundle_dir()


def discover() -> None:
    """Load every ``envgym.envs`` entry point once; a broken plugin is logged, not fatal."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()()
        except Exception as exc:  # a third-party plugin must not break envgym
            log.warning(
                "envgym: could not load environments from %s (%s): %s", ep.name, ep.value, exc
            )


def specs() -> list[EnvSpec]:
    """All registered environments, sorted by id."""
    discover()
    return sorted(_registry.values(), key=lambda s: s.id)


def spec(env_id: str) -> EnvSpec:
    """The spec for an id; an unversioned name resolves to its highest version."""
    discover()
    if env_id in _registry:
        return _registry[env_id]
    scheme, colon, rest = env_id.partition(":")
    if colon and scheme in _schemes:
        return _schemes[scheme](rest)
    if "/" in env_id:  # a benchmark's "family/domain" spelling (tau2/airline → tau2-airline)
        env_id = env_id.replace("/", "-")
        if env_id in _registry:
            return _registry[env_id]
    versions = [s for s in _registry.values() if s.name == env_id]
    if versions:
        return max(versions, key=lambda s: s.version)
    close = difflib.get_close_matches(env_id, list(_registry), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise KeyError(f"no environment {env_id!r} is registered{hint} (see `envgym list`)")


def make(env_id: str | Path, **kwargs: Any) -> Env:
    """Build an environment from a registered id or from a bundle directory."""
    path = Path(env_id)
    if isinstance(env_id, Path) or (path / "manifest.json").is_file():
        from envgym.bundle_env import BundleEnv  # local: keeps `import envgym` light

        return BundleEnv(path, **kwargs)
    found = spec(str(env_id))
    return found.entry_point(**{**found.kwargs, **kwargs})


def env_factory(target: str | Path, **kwargs: Any) -> Callable[[], Env]:
    """A zero-argument factory of exactly what ``make(target, **kwargs)`` builds.

    ``envgym eval`` and the synthesis filter build their envs through this, so a registered
    family runs with its own env class (``code-interpreter-v0`` gets ``CodeInterpreterEnv``: its
    system prompt and Jupyter kernel), never a plain ``BundleEnv`` of the same bundle, so
    evaluation scores the env that training runs.  An id is resolved now (a typo fails before
    any episode starts) and pinned to its version; the factory is a ``functools.partial`` of
    :func:`make`, so it pickles (Ray actors).
    """
    if _is_bundle_dir(target):
        return functools.partial(make, Path(target), **kwargs)
    return functools.partial(make, spec(str(target)).id, **kwargs)


def env_identity(target: str | Path) -> str:
    """What builds ``target``'s envs, for keys and reports: ``"id:<name-vN>"`` or ``"bundle-dir"``."""
    return "bundle-dir" if _is_bundle_dir(target) else f"id:{spec(str(target)).id}"


def _is_bundle_dir(target: str | Path) -> bool:
    return isinstance(target, Path) or (Path(target) / "manifest.json").is_file()
