"""A misspelled ``envgym.make`` keyword is a TypeError naming it and the valid keywords, for one
env of every registered family, and before the env starts anything (a τ² worker, a kernel, an
SWE instance's load)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import envgym
from envgym import registry

# One env id per family of the ``envgym.envs`` entry points, and a keyword each accepts.
FAMILY_ENVS = {
    "trip-planning": ("trip-planning-v0", "max_turns"),
    "code-interpreter": ("code-interpreter-v0", "max_turns"),
    "retail-orders": ("retail-orders-v0", "max_turns"),
    "meeting-scheduling": ("meeting-scheduling-v0", "max_turns"),
    "shipment-logistics": ("shipment-logistics-v0", "max_turns"),
    "search-qa": ("search-qa-v0", "max_turns"),
    "tau2": ("tau2-mock-v0", "context_window"),
    "mcp-suite": ("mcp-suite-sqlite-v0", "max_turns"),
    "swe": ("swe-v0", "max_turns"),
    # a scheme, not an id: harbor:PATH over a Harbor task or dataset folder (the shipped one)
    "harbor": (
        f"harbor:{Path(__file__).resolve().parents[1] / 'envgym' / 'envs' / 'harbor' / 'dataset'}",
        "max_turns",
    ),
}


def pyproject_families() -> set[str]:
    """The ``envgym.envs`` entry points of this checkout's pyproject (not of whatever envgym the
    venv last installed, which may be another checkout's)."""
    config = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    return set(config["project"]["entry-points"]["envgym.envs"])


def test_every_registered_family_is_covered() -> None:
    assert pyproject_families() == set(FAMILY_ENVS), (
        "a new family: add one of its envs to FAMILY_ENVS"
    )
    known = {s.id for s in registry.specs()}
    assert {env for env, _ in FAMILY_ENVS.values() if ":" not in env} <= known


@pytest.mark.timeout(120)
@pytest.mark.parametrize("family", sorted(FAMILY_ENVS))
def test_a_misspelled_keyword_is_named_with_the_valid_ones(family: str) -> None:
    env_id, valid = FAMILY_ENVS[family]
    typo = valid[:-1] + valid[-1] * 2 + "x"  # max_turnssx: close to the real one
    with pytest.raises(TypeError) as err:
        envgym.make(env_id, **{typo: 3})
    message = str(err.value)
    assert repr(typo) in message, message
    assert "valid keywords" in message and valid in message, message
    assert f"did you mean {valid}" in message, message  # the close match is offered first
