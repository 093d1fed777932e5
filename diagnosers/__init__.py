"""The diagnosers that ship with faultbench (installed as ``faultbench.diagnosers``)."""

from __future__ import annotations

from faultbench.diagnosers.baselines import AlwaysHealthy, RandomDiagnoser

__all__ = ["AlwaysHealthy", "RandomDiagnoser"]
