"""``learned``: a random forest on trace features, in the spirit of DeepFD.

No probe: only relative quantities read off the trace (see :func:`features`).
It trains on digits runs with seeds disjoint from every scored seed: the nine
known faults at their canonical severities and healthy, each on the task's
reference recipe and on a base drawn from digits' family (where the fault
applies to it), and more healthy drawn bases, with balanced class weights, so
that it learns the faults across designs rather than one recipe's numbers; its
features are read off the traces as the Monitor records them by default (every
20th step), as every run it diagnoses is. The runs are
made through :func:`faultbench.storage.runner.ensure_records`, stored once and
reused. The fitted forest is never pickled: refitting from the stored runs is
deterministic and takes about a second, so it is simply refit in every process
that needs it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from sklearn.ensemble import RandomForestClassifier

from faultbench.diagnosers import _features as f
from faultbench.faults.fault import canonical_conditions
from faultbench.faults.recipe import base_setup
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.run import Run
from faultbench.storage.bases import verified_bases
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import Engine, LocalEngine

TRAIN_TASK = "digits"
TRAIN_SEEDS = tuple(range(100, 110))  # disjoint from every scored seed (0..49) and calibration
#: Healthy drawn bases it also learns from: one in ten of its runs would be healthy otherwise,
#: and a forest fitted on that mix calls a third of digits' healthy drawn bases faulty.
HEALTHY_SEEDS = tuple(range(100, 130))
TREES = 300  # enough that the vote is stable; fits ~100 rows in well under a second
FEATURES = (
    "log_first_loss_over_ln_c",
    "end_loss_over_ln_c",
    "min_loss_over_probability_floor",
    "train_score_above_chance",
    "val_score_above_chance",
    "train_val_gap",
    "starving",
    "max_no_grad_share",
    "log_min_weight_change",
    "log_grad_growth",
    "log_jitter_drop",
    "log_max_update_ratio",
    "spike_share",
    "nonfinite_share",
    "inactive_share",
    "min_width_over_classes",
)


#: Whether the run waited for data more than this share of its step time. The share is
#: wall-clock time, which moves a little from one training of a run to the next: as a
#: number it moved the forest's splits, so two cold reports' fits disagreed on 24 of 2,415
#: answers. Digits (a cold report's runs): the other runs wait at most 0.08 of the time,
#: the starved ones at least 0.16; the mark sits between.
STARVING = 0.12


def _log(value: float, floor: float = 1e-12) -> float:
    # Ratios span orders of magnitude; logs keep a tree's splits meaningful.
    return math.log10(max(value, floor)) if math.isfinite(value) else 0.0


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _above(score: float, chance: float) -> float:
    """How far a score is from chance towards perfect (0 at chance, 1 perfect), for any kind:
    a ratio to chance means nothing where chance is an R² of 0."""
    return (score - chance) / (1.0 - chance) if chance < 1.0 else math.nan


def features(run: Run) -> np.ndarray:
    """The run's feature vector, in the order of :data:`FEATURES`; always finite."""
    lnc, chance = f.ln_c(run), f.chance(run)
    losses = f.finite_losses(run)
    end = float(np.mean(losses[-max(1, len(losses) // 10) :])) if len(losses) else math.nan
    lowest = float(losses.min()) if len(losses) else math.nan
    first = f.first_loss(run)
    changes = [v for v in run.trace.weight_change.values() if math.isfinite(v)]
    widths = f.hidden_widths(run)
    values = [
        _log(first / lnc if math.isfinite(first) else 1e6),
        end / lnc,
        lowest / f.probability_floor(run),
        _above(f.final_train_acc(run), chance),
        _above(f.final_val_acc(run), chance),
        f.final_train_acc(run) - f.final_val_acc(run),
        float(run.trace.wait_share > STARVING),
        max(f.no_grad_share(run).values(), default=0.0),
        _log(min(changes, default=0.0)),
        _log(f.grad_growth(run)),
        _log(f.grad_jitter_drop(run)),
        _log(max(f.update_ratio(run).values(), default=0.0)),
        f.spike_share(run),
        f.nonfinite_share(run),
        f.inactive_share(run),
        (min(widths) if widths else 0) / f.n_classes(run),
    ]
    return np.array([_finite(v) for v in values], dtype=np.float64)


class LearnedDiagnoser:
    """A random forest over :func:`features`, fitted on digits runs on first use."""

    name = "learned"
    probes = False  # reads the trace alone
    tuned_on: frozenset[str] | set[str] = frozenset({TRAIN_TASK})

    def __init__(
        self,
        seeds: Sequence[int] = TRAIN_SEEDS,
        store: Store | str | None = None,
        engine: Engine | None = None,
    ) -> None:
        self.seeds = tuple(seeds)
        self.store = store
        self.engine = engine
        self._forest: RandomForestClassifier | None = None

    def fit(self, records: Iterable[RunRecord]) -> LearnedDiagnoser:
        """Fit the forest on stored runs (their conditions are the labels)."""
        task = get_task(TRAIN_TASK)
        usable = sorted(
            (r for r in records if r.ok and r.trace is not None),
            key=lambda r: (r.spec.condition.name, r.spec.seed, r.spec.folder),  # fixes the fit
        )
        X = np.stack([features(run_for(r, task)) for r in usable])
        y = [r.spec.condition.name for r in usable]
        # Balanced class weights: nine faults against one healthy class, which a practitioner
        # runs it on most often.
        forest = RandomForestClassifier(
            n_estimators=TREES, random_state=0, n_jobs=1, class_weight="balanced"
        )
        self._forest = forest.fit(X, y)
        return self

    def training_records(self) -> list[RunRecord]:
        """The digits runs it learns from, trained now if not stored yet."""
        task = get_task(TRAIN_TASK)
        store = self.store if isinstance(self.store, Store) else Store(self.store)
        engine = self.engine or LocalEngine()
        try:
            seeds = sorted({*self.seeds, *HEALTHY_SEEDS})
            bases = verified_bases(task, seeds, store=store, engine=engine)
            specs = [
                RunSpec(task.name, task.fingerprint, cond, seed, design)
                for cond in canonical_conditions()
                for seed in seeds
                for design in (None, bases[seed].design)
                if (seed in self.seeds or (not cond.faults and design is not None))
                and not cond.why_not(base_setup(task, seed, design))
            ]
            return [rec for _, rec, _ in ensure_records(specs, task, store=store, engine=engine)]
        finally:
            if self.engine is None:
                engine.close()

    def prepare(self, *, store: Store | None = None, engine: Engine | None = None) -> None:
        """Fit the forest (training its runs if not stored) unless already fitted.

        ``evaluate`` calls this before the first diagnosis with its own store and
        engine, so the training runs land where the evaluated runs do and
        fitting never counts against the per-diagnosis time limit.
        """
        if self._forest is None:
            if store is not None and self.store is None:
                self.store = store
            if engine is not None and self.engine is None:
                self.engine = engine
            self.fit(self.training_records())

    def diagnose(self, run: Run) -> Diagnosis:
        """The forest's vote, with its share of trees as confidence."""
        self.prepare()
        assert self._forest is not None
        x = features(run)
        proba = self._forest.predict_proba(x.reshape(1, -1))[0]
        best = int(np.argmax(proba))
        evidence = {name: float(v) for name, v in zip(FEATURES, x, strict=True)}
        return Diagnosis(str(self._forest.classes_[best]), float(proba[best]), evidence)


DIAGNOSERS.add("learned", LearnedDiagnoser)
