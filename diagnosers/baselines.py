"""Two baselines that bound the scores from below."""

from __future__ import annotations

import numpy as np

from faultbench.faults.fault import condition_names
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Run


@DIAGNOSERS.register("always-healthy")
class AlwaysHealthy:
    """Says every run is healthy: what a tool that finds nothing scores."""

    name = "always-healthy"
    probes = False  # reads the trace alone
    tuned_on: frozenset[str] = frozenset()

    def diagnose(self, run: Run) -> Diagnosis:
        """Answer ``healthy``."""
        return Diagnosis("healthy", confidence=None, evidence={})


@DIAGNOSERS.register("random")
class RandomDiagnoser:
    """Names a condition uniformly at random, seeded by the run's seed and trace.

    Deterministic for a given run, so two evaluations of it agree.
    """

    name = "random"
    probes = False  # reads the trace alone
    tuned_on: frozenset[str] = frozenset()

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def diagnose(self, run: Run) -> Diagnosis:
        """Answer a label drawn from a generator seeded by the run."""
        labels = condition_names()
        # The first loss tells runs of one seed apart without revealing anything.
        first = (
            float(np.nan_to_num(run.trace.loss[0], posinf=1e9, neginf=-1e9))
            if run.trace.steps
            else 0.0
        )
        salt = int(abs(first) * 1e6) % 1_000_003
        rng = np.random.default_rng([self.seed, run.seed, salt])
        return Diagnosis(str(rng.choice(labels)), confidence=1 / len(labels), evidence={})
