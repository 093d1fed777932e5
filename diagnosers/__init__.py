"""The diagnosers that ship with faultbench (installed as ``faultbench.diagnosers``)."""

from __future__ import annotations

from faultbench.diagnosers.autotrainer import AutoTrainer
from faultbench.diagnosers.baselines import AlwaysHealthy, RandomDiagnoser
from faultbench.diagnosers.cockpit_live import CockpitLiveDiagnoser
from faultbench.diagnosers.cockpit_tool import CockpitDiagnoser
from faultbench.diagnosers.deepdiagnosis import DeepDiagnosis
from faultbench.diagnosers.defaultdiag import DefaultPort
from faultbench.diagnosers.doctor import DoctorDiagnoser
from faultbench.diagnosers.learned import LearnedDiagnoser
from faultbench.diagnosers.lr_range import LRRangeDiagnoser
from faultbench.diagnosers.rules import RulesDiagnoser
from faultbench.diagnosers.rules_v1 import RulesV1Diagnoser
from faultbench.diagnosers.thedeepchecker import TheDeepChecker
from faultbench.diagnosers.traincheck_tool import TrainCheckDiagnoser
from faultbench.diagnosers.umlaut import Umlaut
from faultbench.diagnosers.weightwatcher_tool import WeightWatcherDiagnoser

__all__ = [
    "AlwaysHealthy",
    "AutoTrainer",
    "CockpitDiagnoser",
    "CockpitLiveDiagnoser",
    "DeepDiagnosis",
    "DefaultPort",
    "DoctorDiagnoser",
    "LRRangeDiagnoser",
    "LearnedDiagnoser",
    "RandomDiagnoser",
    "RulesDiagnoser",
    "RulesV1Diagnoser",
    "TheDeepChecker",
    "TrainCheckDiagnoser",
    "Umlaut",
    "WeightWatcherDiagnoser",
]
