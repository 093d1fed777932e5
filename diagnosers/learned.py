"""``learned``: a random forest on trace features, in the spirit of DeepFD, held to the
doctor's false-alarm budget.

No probe: only relative quantities read off the trace (see :func:`features`), each meaning
the same on every kind of task (a loss against the kind's reference, a score against its
chance level, a width against the classes scored; a feature a kind does not have reads
:data:`NOT_APPLICABLE`). It trains on the runs of the tasks ``rules`` is tuned on (a
classifier, a regression and a language model: :data:`TRAINING`), with seeds disjoint from
every scored seed (0..49), the calibration seeds (1000+) and the DEFault port's (200..299):
the known faults that apply to each task at their canonical severities and healthy, each
on the task's reference recipe and on a base drawn from its family, and more healthy drawn
bases, with balanced class weights, so that it learns the faults across designs rather
than one recipe's numbers. Its features are read off the traces as the Monitor records
them by default (every 20th step), as every run it diagnoses is.

**Its alarm is held to the doctor's budget** (:data:`faultbench.scoring.budget.BUDGET`).
The forest's vote for "healthy" on a healthy run it was fitted on says nothing, so each
healthy drawn run of its training set is scored by a forest fitted without that run's seed
(out-of-fold, grouped by seed); the threshold is the value of 1 - P(healthy) that at most
that share of them exceed, per kind (:func:`faultbench.scoring.budget.calibrate`, stated
as the doctor's are), pooled over the tuned-on kinds for a kind none of them has. A run
below it is healthy; above it, the fault the forest votes for most, or ``unknown`` (an
alarm that names nothing) where the forest still votes healthy first: it cannot tell which
fault.

Its limit is the one a learned diagnoser fitted on few programs has (docs/method.md,
"Training on the runs dataset"): a feature relative to the kind (a score above chance, a
loss against the kind's reference) still carries what the task lets a healthy run reach,
and one regression (diabetes, R² about 0.35) says little about another (friedman, about
0.9): the threshold holds the budget on the tuned-on tasks, not on a held-out one.

The runs are made through :func:`faultbench.storage.runner.ensure_records`, stored once
and reused. The fitted forests are never pickled: refitting from the stored runs is
deterministic and takes seconds, so it is simply refit in every process that needs it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import GroupKFold

from faultbench.diagnosers import _features as f
from faultbench.faults.fault import canonical_conditions
from faultbench.faults.recipe import base_setup
from faultbench.scoring.budget import ANY_KIND, BUDGET, DIGITS, Calibration, calibrate, kind_of
from faultbench.scoring.diagnosis import DIAGNOSERS, UNKNOWN, Diagnosis
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.run import Run
from faultbench.storage.bases import DATA_BOUND, verified_bases
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import Engine, LocalEngine

HEALTHY = "healthy"


@dataclass(frozen=True)
class TrainingSeeds:
    """One task's training runs: every applicable fault (and healthy) on ``faults``' seeds,
    on the reference recipe and a drawn base; healthy drawn bases on ``healthy``'s, which
    also calibrate the alarm (a kind's threshold lets floor(5% of them) exceed it)."""

    faults: tuple[int, ...]
    healthy: tuple[int, ...]


#: The tasks it learns from, the same ``rules`` is tuned on (a test holds them equal).
#: Seeds from 100: no scored seed (0..49), no calibration seed (1000+), none of the DEFault
#: port's (200..299). A language model's run costs about ten of the others', so numbers has
#: one fault seed (each fault on its reference recipe and a drawn base); every task keeps at
#: least 20 healthy drawn bases, the fewest at which the budget lets one exceed the threshold.
TRAINING: Mapping[str, TrainingSeeds] = {
    "diabetes": TrainingSeeds(tuple(range(100, 110)), tuple(range(100, 130))),
    "digits": TrainingSeeds(tuple(range(100, 110)), tuple(range(100, 130))),
    "numbers": TrainingSeeds((100,), tuple(range(100, 120))),
}
TREES = 300  # enough that the vote is stable; fits a few hundred rows in about a second
FOLDS = 5  # out-of-fold scores of the healthy runs: each scored by a forest without its seed
NOT_APPLICABLE = -1.0  # a feature the run's kind does not have (below every real value)
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


def waiting_mark(runs: Iterable[Run]) -> float:
    """The share of its step time a run may wait for data and still read as not starving:
    the longest any of ``runs`` (the healthy runs it is fitted on) waited, NaN with none.

    The ``starving`` feature is a mark against it, not the share itself: the share is
    wall-clock time, which moves a little from one training of a run to the next, and as a
    number it moved the forest's splits (two cold reports' fits disagreed on 24 of 2,415
    answers). Measured on the training runs rather than set on digits: a tiny model's
    healthy steps wait a larger share of their time (diabetes' up to a quarter on a loaded
    machine, where digits' wait a tenth), and a mark set on digits (0.12) called a fifth of
    diabetes' healthy runs starved. Never below half the bound of data-bound
    (:data:`~faultbench.storage.bases.DATA_BOUND`), under which the family keeps every
    healthy run: with few training runs the longest wait is one busy moment's, and a
    healthy run of a suite on both cores waited longer than the two it was fitted on."""
    shares = [run.trace.wait_share for run in runs if math.isfinite(run.trace.wait_share)]
    return max(*shares, DATA_BOUND / 2) if shares else math.nan


def _log(value: float, floor: float = 1e-12) -> float:
    # Ratios span orders of magnitude; logs keep a tree's splits meaningful.
    return math.log10(max(value, floor)) if math.isfinite(value) else 0.0


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _above(score: float, chance: float) -> float:
    """How far a score is from chance towards perfect (0 at chance, 1 perfect), for any kind:
    a ratio to chance means nothing where chance is an R² of 0."""
    return (score - chance) / (1.0 - chance) if chance < 1.0 else math.nan


def _or_not_applicable(value: float) -> float:
    return value if math.isfinite(value) else NOT_APPLICABLE


def _width_over_classes(run: Run) -> float:
    """The fewest values a hidden layer passes on, per class scored: a classifier's (or a
    language model's, per token) bottleneck. Not applicable to a kind without classes: a
    regression's single output bounds nothing, and an autoencoder's code is narrow by design."""
    widths = f.carried_widths(run)
    if not f.is_classes(run) or not widths:
        return NOT_APPLICABLE
    return min(widths) / f.n_classes(run)


def features(run: Run, waiting: float) -> np.ndarray:
    """The run's feature vector, in the order of :data:`FEATURES`, with ``waiting`` the
    :func:`waiting_mark` (NaN: none, never starving); always finite."""
    lnc, chance = f.ln_c(run), f.chance(run)
    losses = f.finite_losses(run)
    end = float(np.mean(losses[-max(1, len(losses) // 10) :])) if len(losses) else math.nan
    lowest = float(losses.min()) if len(losses) else math.nan
    first = f.first_loss(run)
    changes = [v for v in run.trace.weight_change.values() if math.isfinite(v)]
    train, val = _above(f.final_train_acc(run), chance), _above(f.final_val_acc(run), chance)
    values = [
        _log(first / lnc if math.isfinite(first) else 1e6),
        end / lnc,
        _or_not_applicable(lowest / f.probability_floor(run)),  # NaN: a squared error's
        train,
        val,
        train - val,  # both above chance: a gap in the same units for every kind
        float(run.trace.wait_share > waiting),  # NaN compares False
        max(f.no_grad_share(run).values(), default=0.0),
        _log(min(changes, default=0.0)),
        _log(f.grad_growth(run)),
        _log(f.grad_jitter_drop(run)),
        _log(max(f.update_ratio(run).values(), default=0.0)),
        f.spike_share(run),
        f.nonfinite_share(run),
        f.inactive_share(run),
        _width_over_classes(run),
    ]
    return np.array([_finite(v) for v in values], dtype=np.float64)


@dataclass(frozen=True)
class Example:
    """One training run as the forest sees it."""

    x: np.ndarray  # its features
    label: str  # its condition
    seed: int  # its seed: out-of-fold scores hold whole seeds out
    kind: str  # what its task predicts (the kind its alarm is calibrated on)
    calibrates: bool  # a healthy run on a drawn base: the population the budget is met on


def _forest() -> RandomForestClassifier:
    # Balanced class weights: many faults against one healthy class, which a practitioner
    # runs it on most often.
    return RandomForestClassifier(
        n_estimators=TREES, random_state=0, n_jobs=1, class_weight="balanced"
    )


def _healthy_share(forest: RandomForestClassifier, X: np.ndarray) -> np.ndarray:
    """P(healthy) per row (0 where the forest never saw a healthy run)."""
    classes = list(forest.classes_)
    if HEALTHY not in classes:
        return np.zeros(len(X))
    return forest.predict_proba(X)[:, classes.index(HEALTHY)]


def out_of_fold_alarm_scores(examples: Sequence[Example]) -> np.ndarray:
    """1 - P(healthy) for every example, each from a forest fitted without its seed's runs
    (in-sample where there is a single seed, and no fold to hold out)."""
    X = np.stack([e.x for e in examples])
    y = np.array([e.label for e in examples])
    seeds = np.array([e.seed for e in examples])
    folds = min(FOLDS, len(set(seeds.tolist())))
    if folds < 2:
        return 1.0 - _healthy_share(_forest().fit(X, y), X)
    scores = np.empty(len(examples))
    for fit_rows, held_rows in GroupKFold(n_splits=folds).split(X, y, seeds):
        forest = _forest().fit(X[fit_rows], y[fit_rows])
        scores[held_rows] = 1.0 - _healthy_share(forest, X[held_rows])
    return scores


def calibrate_alarm(examples: Sequence[Example]) -> dict[str, Calibration]:
    """Kind -> the alarm's calibration on that kind's healthy drawn training runs, at the
    doctor's budget, and :data:`ANY_KIND` -> on all of them (for a kind none has). A forest
    fitted on no drawn base (a test's, on reference recipes) calibrates on its healthy runs."""
    scores = out_of_fold_alarm_scores(examples)
    drawn = any(e.calibrates for e in examples)
    healthy = [
        (e.kind, s)
        for e, s in zip(examples, scores, strict=True)
        if (e.calibrates if drawn else e.label == HEALTHY)
    ]
    kinds = sorted({kind for kind, _ in healthy})
    found = {
        k: calibrate("learned", k, [s for kind, s in healthy if kind == k], BUDGET) for k in kinds
    }
    found[ANY_KIND] = calibrate("learned", ANY_KIND, [s for _, s in healthy], BUDGET)
    return found


class LearnedDiagnoser:
    """A random forest over :func:`features`, fitted on the tuned-on tasks' runs on first
    use, its alarm calibrated to the doctor's false-alarm budget."""

    name = "learned"
    probes = False  # reads the trace alone
    tuned_on: frozenset[str] = frozenset(TRAINING)  # the tasks whose runs fit and calibrate it

    def __init__(
        self,
        training: Mapping[str, TrainingSeeds] = TRAINING,
        store: Store | str | None = None,
        engine: Engine | None = None,
    ) -> None:
        self.training = dict(training)
        self.store = store
        self.engine = engine
        self._forest: RandomForestClassifier | None = None
        self._alarm: dict[str, Calibration] = {}
        self.waiting = math.nan  # the waiting mark of its training runs (waiting_mark)
        self.tuned_on = frozenset(self.training)

    def fit(self, records: Iterable[RunRecord]) -> LearnedDiagnoser:
        """Fit the forest on stored runs (their conditions are the labels) and calibrate
        its alarm on the healthy drawn ones."""
        usable = sorted(
            (r for r in records if r.ok and r.trace is not None),
            key=lambda r: (r.spec.task, r.spec.condition.name, r.spec.seed, r.spec.folder),
        )  # the order fixes the fit
        runs = [run_for(r, get_task(r.spec.task)) for r in usable]
        self.waiting = waiting_mark(
            run for r, run in zip(usable, runs, strict=True) if not r.spec.condition.faults
        )
        examples = [self._example(r, run) for r, run in zip(usable, runs, strict=True)]
        X = np.stack([e.x for e in examples])
        self._forest = _forest().fit(X, [e.label for e in examples])
        self._alarm = calibrate_alarm(examples)
        return self

    def features(self, run: Run) -> np.ndarray:
        """:func:`features` of ``run`` against the waiting mark of its training runs."""
        self.prepare()
        return features(run, self.waiting)

    def _example(self, record: RunRecord, run: Run) -> Example:
        spec = record.spec
        calibrates = not spec.condition.faults and spec.design is not None
        return Example(
            features(run, self.waiting), spec.condition.name, spec.seed, kind_of(run), calibrates
        )

    def _specs(self, task_name: str, store: Store, engine: Engine) -> list[RunSpec]:
        task, seeds = get_task(task_name), self.training[task_name]
        every = sorted({*seeds.faults, *seeds.healthy})
        bases = verified_bases(task, every, store=store, engine=engine)
        return [
            RunSpec(task.name, task.fingerprint, cond, seed, design)
            for cond in canonical_conditions(task=task)
            for seed in every
            for design in (None, bases[seed].design)
            if (seed in seeds.faults or (not cond.faults and design is not None))
            and not cond.why_not(base_setup(task, seed, design))
        ]

    def training_records(self) -> list[RunRecord]:
        """The tuned-on tasks' runs it learns from, trained now if not stored yet."""
        store = self.store if isinstance(self.store, Store) else Store(self.store)
        engine = self.engine or LocalEngine()
        try:
            records = []
            for name in sorted(self.training):
                specs = self._specs(name, store, engine)
                records += [
                    rec
                    for _, rec, _ in ensure_records(
                        specs, get_task(name), store=store, engine=engine
                    )
                ]
            return records
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

    def alarm_calibration(self, run: Run) -> Calibration:
        """The calibration the run's alarm is judged against: its kind's, else the pooled."""
        self.prepare()
        return self._alarm.get(kind_of(run)) or self._alarm[ANY_KIND]

    def diagnose(self, run: Run) -> Diagnosis:
        """Healthy unless 1 - P(healthy) exceeds the calibrated threshold; then the fault
        the forest votes for most, or ``unknown`` where it still votes healthy first."""
        self.prepare()
        assert self._forest is not None
        x = self.features(run)
        proba = dict(zip(self._forest.classes_, self._forest.predict_proba(x.reshape(1, -1))[0]))
        # As the calibration stores it: a healthy run scored at the threshold stays healthy.
        score = float(f"{1.0 - proba.get(HEALTHY, 0.0):.{DIGITS}g}")
        alarm = self.alarm_calibration(run)
        evidence = {
            **{name: float(v) for name, v in zip(FEATURES, x, strict=True)},
            "alarm_score": score,
            "threshold": alarm.threshold,
            "healthy_tail": alarm.tail(score),  # share of calibration runs scored as high
            "calibrated_on": f"{alarm.kind}: {len(alarm.healthy)} healthy drawn runs",
            "waiting_mark": self.waiting if math.isfinite(self.waiting) else None,
        }
        if score <= alarm.threshold:
            return Diagnosis(HEALTHY, float(proba.get(HEALTHY, 0.0)), evidence)
        fault, share = max(((c, p) for c, p in proba.items() if c != HEALTHY), key=lambda cp: cp[1])
        if share < proba.get(HEALTHY, 0.0):
            return Diagnosis(UNKNOWN, None, evidence)
        return Diagnosis(str(fault), float(share), evidence)


DIAGNOSERS.add("learned", LearnedDiagnoser)
