"""Registry: versioned ids, unversioned lookup, entry-point discovery, gymnasium mirror, bundle paths."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest

import envgym
from envgym import registry


class _Dummy(envgym.Env):
    def __init__(self, flavour: str = "plain") -> None:
        self.flavour = flavour

    def reset(self, *, seed=None, options=None):
        return {"messages": [], "tools": []}, {
            "reward_components": {},
            "tool_calls": 0,
            "errors": {},
        }

    def step(self, action):
        return (
            {"messages": [], "tools": []},
            0.0,
            True,
            False,
            {"reward_components": {}, "tool_calls": 0, "errors": {}},
        )


@pytest.fixture(autouse=True)
def _clean_registry():
    registry.discover()  # snapshot after discovery so entry-point envs survive the restore
    before = dict(registry._registry)
    yield
    registry._registry.clear()
    registry._registry.update(before)


def test_register_and_make_with_kwargs() -> None:
    envgym.register("dummy-v0", _Dummy, description="d", kwargs={"flavour": "mint"})
    env = envgym.make("dummy-v0")
    assert isinstance(env, _Dummy) and env.flavour == "mint"
    assert envgym.make("dummy-v0", flavour="lime").flavour == "lime"


def test_unversioned_name_resolves_to_latest() -> None:
    envgym.register("dummy-v0", _Dummy, kwargs={"flavour": "old"})
    envgym.register("dummy-v2", _Dummy, kwargs={"flavour": "new"})
    assert envgym.make("dummy").flavour == "new"


def test_bad_ids_and_duplicates() -> None:
    with pytest.raises(ValueError, match="must look like 'name-v0'"):
        envgym.register("Dummy", _Dummy)
    envgym.register("dummy-v0", _Dummy)
    with pytest.raises(ValueError, match="already registered"):
        envgym.register("dummy-v0", _Dummy)
    envgym.register("dummy-v0", _Dummy, override=True)


def test_unknown_id_suggests_close_match() -> None:
    envgym.register("dummy-v0", _Dummy)
    with pytest.raises(KeyError, match="did you mean dummy-v0"):
        envgym.make("dumy-v0")


def test_gymnasium_mirror() -> None:
    envgym.register("dummy-v0", _Dummy, kwargs={"flavour": "gym"})
    env = gymnasium.make("envgym/dummy-v0")
    assert env.unwrapped.flavour == "gym"


def test_entry_points_register_trip_planning() -> None:
    ids = [s.id for s in envgym.specs()]
    assert "trip-planning-v0" in ids


def test_broken_plugin_is_logged_not_fatal(monkeypatch, caplog) -> None:
    class _EP:
        name, value = "broken", "nowhere:register"

        def load(self):
            raise ImportError("no module named nowhere")

    monkeypatch.setattr(registry, "_discovered", False)
    monkeypatch.setattr(registry, "entry_points", lambda group: [_EP()])
    registry.discover()
    assert "could not load environments from broken" in caplog.text


def test_make_from_bundle_path_requires_manifest(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        envgym.make(str(tmp_path))  # a directory without manifest.json is not a bundle


def test_family_checks_claim_their_targets_and_two_claims_are_an_error(monkeypatch) -> None:
    monkeypatch.setattr(registry, "_checks", {})
    registry.register_check("demo-family", lambda t: t.startswith("demo/"), lambda t, **kw: 7)
    handler = registry.check_handler("demo/one")
    assert handler is not None and handler.run("demo/one") == 7
    assert registry.check_handler("trip-planning-v0") is None  # → checked as a bundle
    registry.register_check("greedy", lambda t: True, lambda t, **kw: 0)
    with pytest.raises(ValueError, match="claimed by several checks: demo-family, greedy"):
        registry.check_handler("demo/one")
