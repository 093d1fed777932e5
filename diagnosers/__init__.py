"""The diagnosers that ship with faultbench (installed as ``faultbench.diagnosers``)."""

from __future__ import annotations

from faultbench.diagnosers.baselines import AlwaysHealthy, RandomDiagnoser
from faultbench.diagnosers.learned import LearnedDiagnoser
from faultbench.diagnosers.rules import RulesDiagnoser
from faultbench.diagnosers.rules_v1 import RulesV1Diagnoser

__all__ = [
    "AlwaysHealthy",
    "LearnedDiagnoser",
    "RandomDiagnoser",
    "RulesDiagnoser",
    "RulesV1Diagnoser",
]
