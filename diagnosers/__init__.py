"""The diagnosers that ship with faultbench (installed as ``faultbench.diagnosers``)."""

from __future__ import annotations

from faultbench.diagnosers.baselines import AlwaysHealthy, RandomDiagnoser
from faultbench.diagnosers.rules import RulesDiagnoser

__all__ = ["AlwaysHealthy", "RandomDiagnoser", "RulesDiagnoser"]
