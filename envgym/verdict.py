"""A verifier's report, checked for shape: which constraints passed and why the others failed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Verdict:
    checks: tuple[Check, ...]
    # Set when the verifier itself broke (raised, crashed, timed out, returned a malformed
    # report): the verdict fails, and ``envgym check`` counts it as a verifier fault, never as a
    # rejection: any exception inside a verifier is a failed check, never a pass.
    error: str | None = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def score(self) -> float:
        """Fraction of checks passed (the shaped reward; the default reward is ``passed``)."""
        return sum(c.passed for c in self.checks) / len(self.checks) if self.checks else 0.0

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def components(self) -> dict[str, float]:
        return {c.name: float(c.passed) for c in self.checks}

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "score": self.score,
            "checks": [
                {"name": c.name, "passed": c.passed, "detail": c.detail} for c in self.checks
            ],
        }

    @property
    def failed_names(self) -> frozenset[str]:
        return frozenset(c.name for c in self.checks if not c.passed)

    @classmethod
    def failure(cls, name: str, detail: str) -> Verdict:
        return cls(checks=(Check(name=name, passed=False, detail=detail),))

    @classmethod
    def broken(cls, name: str, detail: str) -> Verdict:
        """The verifier did not produce a usable report (``error`` is set)."""
        return cls(
            checks=(Check(name=name, passed=False, detail=detail),), error=f"{name}: {detail}"
        )

    @classmethod
    def from_report(cls, report: Any) -> Verdict:
        """Parse a verifier's return value; a malformed report is itself a failed check."""
        if not isinstance(report, Mapping) or not isinstance(report.get("checks"), list):
            return cls.broken(
                "verifier_output",
                f"verifier returned {type(report).__name__}, not {{'checks': [...]}}",
            )
        checks = []
        for i, item in enumerate(report["checks"]):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                return cls.broken(
                    "verifier_output", f"check {i} is not {{'name': str, 'passed': bool}}"
                )
            checks.append(
                Check(str(item["name"]), item.get("passed") is True, str(item.get("detail", "")))
            )
        if not checks:
            return cls.broken("verifier_output", "verifier returned no checks")
        return cls(checks=tuple(checks))
