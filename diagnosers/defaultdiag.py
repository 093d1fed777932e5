"""``default-port``: DEFault (Jahan et al., ICSE 2025), ported to faultbench's traces.

DEFault ("Detect and Explain Fault") reads dynamic features of a training run, logged per
epoch by a Keras callback, and answers through a hierarchy of classifiers: stage 1, is the
program faulty; stage 2, one binary classifier per fault category (a program may be
flagged in several); stage 3, the root cause within the category. Its replication package
(``SigmaJahan/DEFault-DNN-Debugging``: ``c_Feature_Extraction/Dynamic/CustomCallback.py``,
``d_DEFault/``) gives the features, their thresholds and the classifiers; this port
re-implements them (no code is copied) and reads them off a faultbench trace:

* **An epoch** is the stretch of steps up to one of the trace's evaluations; a run's row
  is the mean of its epochs' features, as a row of DEFault's training data is a program's
  (its ``epoch`` column holds the mean epoch).
* **Features** are the dynamic columns the package's classifiers read
  (``testForCaseStudy_FD_FC.py``'s ``columns_to_keep``) with the callback's thresholds,
  less four: ``cpu_utilization``, ``gpu_memory_utilization`` and ``memory_usage`` describe
  the machine, not the run (a faultbench trace is the same bits on any machine, and its
  one wall-clock signal moved ``learned``'s fit between two trainings of the same runs);
  ``std_activation`` needs each activation's spread, which the Monitor does not record.
  Where the trace keeps a summary rather than the tensor, :func:`epoch_row` says which.
* **Static features** (layer counts, activation names, parameter counts read from the
  program's Keras source, DEFault's root-cause explanations via SHAP) are left out: a
  diagnoser sees the trace and the configuration, never the program's source.
* **Classifiers**: the package's random forest, ``RandomForestClassifier(n_estimators=100,
  random_state=42)`` on inputs cleaned as it cleans them (non-finite values to the
  training mean, clipped to the training 1st-99th percentiles, standardized), each
  stage's forest keeping its top 20 features by importance (all of this port's 16).
  Two departures, both fixed before any scoring: balanced class weights stand in for
  the package's oversampled training set, and its grid search over the forest's
  settings (216 settings, 5 folds, per classifier) is not run, so that the port refits
  in a few seconds in every process; the forest it searches from is the one used.
* **Answers**: stage 1's probability of a fault below 0.5 (the package's ``config.ini``
  threshold) is ``healthy``; otherwise the categories whose probability reaches 0.5 are
  flagged, the most probable one is the answer's, and stage 3 names the label within it.
  A fault flagged in no category is ``other_fault`` (DEFault found a fault it could not
  place). The evidence names each stage's most important features with their values.

It trains on the tuned-on tasks' runs (the tasks ``rules`` is tuned on), seeds 200 and up:
disjoint from every scored seed (0-49); 200-299 are the port's alone. The runs are made
through :func:`faultbench.storage.runner.ensure_records`, stored once and reused; the
fitted forests are never pickled, since refitting from the stored runs is deterministic
and takes a few seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.ensemble import RandomForestClassifier

from faultbench.faults.fault import canonical_conditions
from faultbench.faults.recipe import base_setup
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis, finite_or_none
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.run import Run
from faultbench.storage.bases import verified_bases
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import Engine, LocalEngine
from faultbench.training.trace import Trace

NAME = "default-port"
#: The tasks ``rules`` is tuned on: the port learns from their runs alone.
TRAIN_TASKS = ("diabetes", "digits", "numbers")
#: Seeds of its faulty and healthy runs (each on the reference recipe and a drawn base):
#: disjoint from every scored seed (0..49); 200..299 are the port's, which ``learned`` leaves alone.
TRAIN_SEEDS = (200, 201, 202)
#: More healthy drawn bases, so that stage 1 sees healthy runs across designs too.
HEALTHY_SEEDS = tuple(range(200, 206))

HEALTHY = "healthy"
OTHER_FAULT = "other_fault"
THRESHOLD = 0.5  # every stage's threshold in the package's config.ini

#: faultbench's known faults -> DEFault's category (its taxonomy: Activation, Layer,
#: Hyperparameter, Loss, Optimization, Regularization, Weights); None where DEFault has no
#: category for the fault (a data fault): stage 1 learns it as a fault, stages 2 and 3
#: never name it.
CATEGORY: Mapping[str, str | None] = {
    "lr_too_high": "hyperparameter",  # DEFault's HLR root cause: the learning rate
    "too_small_model": "layer",  # too few neurons or layers
    "causal_mask_missing": "layer",  # an attention layer built without its mask
    "softmax_before_loss": "activation",  # the output's activation does not fit the loss
    "dead_units": "weights",  # biases initialized so that ReLUs never fire
    "missing_zero_grad": "optimization",  # the optimizer steps on piled-up gradients
    "frozen_layer": "optimization",  # a layer's parameters are never updated
    "resume_without_state": "optimization",  # the optimizer's state is lost at a resume
    "labels_not_shifted": "loss",  # the loss compares the wrong targets
    "unmasked_loss": "loss",  # the loss counts positions it should ignore
    "loss_normalization": "loss",  # the loss is scaled inconsistently
    "huge_inputs": None,  # unnormalized data: DEFault has no data category
    "label_mismatch": None,  # wrong targets in the data
    "leaky_split": None,  # validation data drawn from training data
}
#: Known faults it never trains on: a starved loader leaves every DEFault feature as the
#: healthy run's (only the wall clock differs, which DEFault reads as CPU utilization,
#: left out), and is no fault in DEFault's taxonomy.
NOT_TRAINED = frozenset({"starved_loader"})

FEATURES = (
    "train_acc",
    "val_acc",
    "loss_oscillation",
    "acc_gap_too_big",
    "adjusted_lr",
    "dying_relu",
    "gradient_vanish",
    "gradient_explode",
    "gradient_median",
    "std_grad",
    "gradient_min",
    "mean_grad",
    "large_weight_count",
    "mean_activation",
    "gradient_std",
    "gradient_max",
)
# The callback's thresholds (EnhancedLoggingCallback's defaults and checks).
ACC_GAP = 0.1  # acc_gap_too_big: |train - val| above this
OSCILLATION = 0.01  # loss_oscillation: the epoch loss moved by more than this
DEAD_SHARE = 0.7  # dying_relu: more than this share of ReLU outputs <= 0
VANISH = 1e-4  # gradient_vanish: mean |gradient| below this
EXPLODE = 70.0  # gradient_explode: a gradient above this
LARGE_WEIGHT = 10.0  # large_weight_count: weights above this in magnitude
TREES = 100  # the package's forest
RANDOM_STATE = 42  # the package's seed
TOP_FEATURES = 20  # features each stage keeps by importance (the package's k)
EVIDENCE_FEATURES = 3  # features named in the evidence per stage


# -- features ----------------------------------------------------------------------


def _epochs(trace: Trace) -> list[tuple[int, int]]:
    """(first step, end step) of each epoch: the steps up to each evaluation (0-based,
    end exclusive); the whole run as one epoch when it has no evaluation."""
    ends = [int(e) for e in trace.eval_steps if 0 < e <= trace.steps]
    if not ends:
        return [(0, trace.steps)]
    return list(zip([0, *ends[:-1]], ends, strict=True))


def _recorded(trace: Trace, start: int, end: int) -> np.ndarray:
    """Indices into the per-recorded-step series of the steps in [start, end); the last
    recorded step before ``end`` when none falls inside (a sparse sampling)."""
    steps = trace.stat_steps
    inside = np.flatnonzero((steps >= start) & (steps < end))
    if len(inside):
        return inside
    before = np.flatnonzero(steps < end)
    return before[-1:] if len(before) else np.zeros(0, dtype=int)


def _at(series: Mapping[str, np.ndarray], index: int) -> dict[str, float]:
    return {k: float(v[index]) for k, v in series.items() if index < len(v)}


def _mean(values: Iterable[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return float(np.mean(kept)) if kept else math.nan


def _flag(condition: bool) -> float:
    return 1.0 if condition else 0.0


def epoch_row(trace: Trace, epoch: int) -> dict[str, float]:
    """DEFault's features of one epoch (NaN where the trace has no value).

    Where the callback reads a tensor the trace keeps only a summary of:

    * gradients of the epoch's first batch (vanish, explode) and last (mean, std) are
      read at its first and last recorded steps; ``gradient_explode`` compares each
      layer's gradient L2 norm, not its largest entry, with 70 (the norm is never
      smaller); ``mean_grad`` is the layers' mean |gradient| (the trace keeps no signed
      mean) and ``std_grad`` their root-mean-square gradient (the spread about 0);
    * the per-layer norms of the epoch's mean gradient are the epoch's mean per-layer
      norms; ``large_weight_count`` is the most entries above 10 each layer's weight norm
      allows (0 exactly when the callback's count is);
    * ``dying_relu`` averages the ReLU modules' shares of outputs <= 0 rather than pooling
      their units; ``mean_activation`` is the activation modules' mean |output|;
    * ``adjusted_lr`` is the rate the run used at the epoch's last step (the callback
      decays the rate by 0.9 every epoch; a faultbench monitor never changes the run).
    """
    start, end = _epochs(trace)[epoch]
    rows = _recorded(trace, start, end)
    counts = trace.weight_count
    row = dict.fromkeys(FEATURES, math.nan)
    row.update(_accuracies(trace, epoch))
    row["loss_oscillation"] = (
        _flag(abs(_epoch_loss(trace, epoch) - _epoch_loss(trace, epoch - 1)) > OSCILLATION)
        if epoch
        else 0.0
    )
    row["adjusted_lr"] = float(trace.lr[end - 1]) if 0 < end <= len(trace.lr) else math.nan
    if not len(rows):
        return row
    first, last = int(rows[0]), int(rows[-1])
    row.update(
        _gradient_checks(_at(trace.grad_mean_abs, first), _at(trace.grad_norm, first), counts)
    )
    row.update(
        _layer_norm_spread([_mean(v[rows].tolist()) for v in trace.grad_norm.values() if len(v)])
    )
    mean_abs, norms = _at(trace.grad_mean_abs, last), _at(trace.grad_norm, last)
    row["mean_grad"] = _mean(mean_abs.values())
    row["std_grad"] = _mean(n / math.sqrt(counts[k]) for k, n in norms.items() if counts.get(k))
    row["large_weight_count"] = _large_weights(_at(trace.weight_norm, last), counts)
    shares = _at(trace.nonpositive_share, last)
    row["dying_relu"] = _flag(_mean(shares.values()) > DEAD_SHARE) if shares else 0.0
    row["mean_activation"] = _mean(_at(trace.activation_mean_abs, last).values())
    return row


def _accuracies(trace: Trace, epoch: int) -> dict[str, float]:
    if epoch >= len(trace.train_acc) or epoch >= len(trace.val_acc):
        return {"acc_gap_too_big": 0.0}
    train, val = float(trace.train_acc[epoch]), float(trace.val_acc[epoch])
    # A NaN gap is no gap, as the callback's comparison has it.
    return {
        "train_acc": train,
        "val_acc": val,
        "acc_gap_too_big": _flag(abs(train - val) > ACC_GAP),
    }


def _epoch_loss(trace: Trace, epoch: int) -> float:
    start, end = _epochs(trace)[epoch]
    losses = trace.loss[start:end]
    # Keras's running mean: a NaN step makes the epoch's loss NaN, which never oscillates.
    return float(np.mean(losses)) if len(losses) else math.nan


def _gradient_checks(
    mean_abs: Mapping[str, float], norms: Mapping[str, float], counts: Mapping[str, int]
) -> dict[str, float]:
    weighted = [(mean_abs[k] * counts[k], counts[k]) for k in mean_abs if counts.get(k)]
    overall = sum(w for w, _ in weighted) / sum(n for _, n in weighted) if weighted else math.nan
    return {
        "gradient_vanish": _flag(overall < VANISH),
        "gradient_explode": _flag(any(n > EXPLODE for n in norms.values())),
    }


def _layer_norm_spread(norms: Sequence[float]) -> dict[str, float]:
    finite = np.array([n for n in norms if math.isfinite(n)])
    if not len(finite):
        return {}
    return {
        "gradient_median": float(np.median(finite)),
        "gradient_std": float(np.std(finite)),
        "gradient_max": float(finite.max()),
        "gradient_min": float(finite.min()),
    }


def _large_weights(norms: Mapping[str, float], counts: Mapping[str, int]) -> float:
    total = 0
    for layer, norm in norms.items():
        if math.isfinite(norm):
            total += min(counts.get(layer, 0), math.floor(norm**2 / LARGE_WEIGHT**2))
    return float(total)


def features(run: Run) -> np.ndarray:
    """The run's row, in the order of :data:`FEATURES`: its epochs' mean (NaN where no
    epoch has a value; the fitted stages fill it as DEFault does)."""
    trace = run.trace
    rows = [epoch_row(trace, k) for k in range(len(_epochs(trace)))] if trace.steps else []
    values = [_mean(_finite_or_nan(r[name]) for r in rows) for name in FEATURES]
    return np.array(values, dtype=np.float64)


def _finite_or_nan(value: float) -> float:
    return value if math.isfinite(value) else math.nan


# -- the stages --------------------------------------------------------------------


@dataclass(frozen=True)
class Cleaning:
    """DEFault's input cleaning, fitted on the training rows: a missing or non-finite
    value becomes the column's mean, then every value is clipped to the column's 1st-99th
    percentiles and standardized."""

    fill: np.ndarray
    low: np.ndarray
    high: np.ndarray
    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray) -> Cleaning:
        column_mean = np.nan_to_num(np.nanmean(np.where(np.isfinite(X), X, np.nan), axis=0))
        filled = _fill(X, column_mean)
        low, high = np.percentile(filled, 1, axis=0), np.percentile(filled, 99, axis=0)
        clipped = np.clip(filled, low, high)
        scale = clipped.std(axis=0)
        return cls(column_mean, low, high, clipped.mean(axis=0), np.where(scale > 0, scale, 1.0))

    def apply(self, X: np.ndarray) -> np.ndarray:
        return (np.clip(_fill(X, self.fill), self.low, self.high) - self.mean) / self.scale


def _fill(X: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(X), X, values)


@dataclass(frozen=True)
class Stage:
    """One of DEFault's classifiers: a forest over its most important features."""

    forest: RandomForestClassifier | None  # None: a single class, always answered
    classes: tuple[str, ...]
    kept: tuple[int, ...]  # the feature columns it reads, most important first

    @classmethod
    def fit(cls, X: np.ndarray, y: Sequence[str]) -> Stage:
        classes = tuple(sorted(set(y)))
        if len(classes) == 1:
            return cls(None, classes, ())
        ranking = _forest().fit(X, y).feature_importances_
        kept = tuple(int(i) for i in np.argsort(-ranking, kind="stable")[:TOP_FEATURES])
        forest = _forest().fit(X[:, list(kept)], y)
        return cls(forest, tuple(str(c) for c in forest.classes_), kept)

    def probabilities(self, x: np.ndarray) -> dict[str, float]:
        if self.forest is None:
            return {self.classes[0]: 1.0}
        proba = self.forest.predict_proba(x[list(self.kept)].reshape(1, -1))[0]
        return {c: float(p) for c, p in zip(self.classes, proba, strict=True)}

    def deciding(self, raw: np.ndarray) -> dict[str, float | None]:
        """The stage's most important features, with the run's values (before cleaning)."""
        if self.forest is None:
            return {}
        order = np.argsort(-self.forest.feature_importances_, kind="stable")
        top = [self.kept[int(i)] for i in order[:EVIDENCE_FEATURES]]
        return {FEATURES[i]: finite_or_none(float(raw[i])) for i in top}


def _forest() -> RandomForestClassifier:
    # The package's forest; balanced weights stand in for its oversampled training set.
    return RandomForestClassifier(
        n_estimators=TREES, random_state=RANDOM_STATE, n_jobs=1, class_weight="balanced"
    )


@dataclass(frozen=True)
class Hierarchy:
    """The three stages, fitted: detection, a classifier per category, a root cause per
    category."""

    cleaning: Cleaning
    detection: Stage
    categories: Mapping[str, Stage]  # category -> its flag (positive class: the category)
    causes: Mapping[str, Stage]  # category -> the label within it

    @classmethod
    def fit(cls, X: np.ndarray, labels: Sequence[str]) -> Hierarchy:
        cleaning = Cleaning.fit(X)
        Z = cleaning.apply(X)
        detection = Stage.fit(Z, [HEALTHY if y == HEALTHY else "faulty" for y in labels])
        placed = [i for i, y in enumerate(labels) if CATEGORY.get(y)]
        found = sorted({str(CATEGORY[labels[i]]) for i in placed})
        categories, causes = {}, {}
        for category in found:
            flags = [category if CATEGORY[labels[i]] == category else "other" for i in placed]
            categories[category] = Stage.fit(Z[placed], flags)
            members = [i for i in placed if CATEGORY[labels[i]] == category]
            causes[category] = Stage.fit(Z[members], [labels[i] for i in members])
        return cls(cleaning, detection, categories, causes)

    def answer(self, raw: np.ndarray) -> Diagnosis:
        z = self.cleaning.apply(raw.reshape(1, -1))[0]
        faulty = self.detection.probabilities(z).get("faulty", 0.0)
        evidence: dict[str, object] = {
            "faulty_probability": faulty,
            "detection_features": self.detection.deciding(raw),
            "features": {n: finite_or_none(float(v)) for n, v in zip(FEATURES, raw, strict=True)},
        }
        if faulty < THRESHOLD:
            return Diagnosis(HEALTHY, 1.0 - faulty, {**evidence, "stage": "detection"})
        chances = {c: s.probabilities(z).get(c, 0.0) for c, s in self.categories.items()}
        flagged = sorted(
            (c for c, p in chances.items() if p >= THRESHOLD), key=lambda c: -chances[c]
        )
        evidence.update(category_probabilities=chances, flagged=flagged)
        if not flagged:
            return Diagnosis(OTHER_FAULT, faulty, {**evidence, "stage": "categorization"})
        category = flagged[0]
        causes = self.causes[category].probabilities(z)
        label = max(sorted(causes), key=lambda c: causes[c])
        return Diagnosis(
            label,
            faulty * chances[category] * causes[label],
            {
                **evidence,
                "stage": "root_cause",
                "category": category,
                "category_features": self.categories[category].deciding(raw),
                "cause_probabilities": causes,
                "cause_features": self.causes[category].deciding(raw),
            },
        )


# -- the diagnoser -----------------------------------------------------------------


class DefaultPort:
    """DEFault's hierarchy over its dynamic features, fitted on the tuned-on tasks' runs."""

    name = NAME
    probes = False  # reads the trace alone
    tuned_on: frozenset[str] | set[str] = frozenset(TRAIN_TASKS)

    def __init__(
        self,
        seeds: Sequence[int] = TRAIN_SEEDS,
        healthy_seeds: Sequence[int] = HEALTHY_SEEDS,
        tasks: Sequence[str] = TRAIN_TASKS,
        store: Store | str | None = None,
        engine: Engine | None = None,
    ) -> None:
        self.seeds = tuple(seeds)
        self.healthy_seeds = tuple(healthy_seeds)
        self.tasks = tuple(tasks)
        self.tuned_on = frozenset(self.tasks)
        self.store = store
        self.engine = engine
        self._hierarchy: Hierarchy | None = None

    def training_specs(self, store: Store, engine: Engine) -> dict[str, list[RunSpec]]:
        """Task -> the runs it learns from: every trained known fault at its canonical
        severity and healthy, on the reference recipe and a drawn base per seed, and
        healthy drawn bases of the healthy seeds."""
        specs: dict[str, list[RunSpec]] = {}
        seeds = sorted({*self.seeds, *self.healthy_seeds})
        for name in self.tasks:
            task = get_task(name)
            bases = verified_bases(task, seeds, store=store, engine=engine)
            specs[name] = [
                RunSpec(task.name, task.fingerprint, cond, seed, design)
                for cond in canonical_conditions(task=task)
                if cond.name not in NOT_TRAINED
                for seed in seeds
                for design in (None, bases[seed].design)
                if (seed in self.seeds or (not cond.faults and design is not None))
                and not cond.why_not(base_setup(task, seed, design))
            ]
        return specs

    def training_records(self) -> list[tuple[str, RunRecord]]:
        """(task, record) of every run it learns from, trained now if not stored yet."""
        store = self.store if isinstance(self.store, Store) else Store(self.store)
        engine = self.engine or LocalEngine()
        try:
            found = []
            for name, specs in self.training_specs(store, engine).items():
                task = get_task(name)
                found += [
                    (name, rec)
                    for _, rec, _ in ensure_records(specs, task, store=store, engine=engine)
                ]
            return found
        finally:
            if self.engine is None:
                engine.close()

    def fit(self, records: Iterable[tuple[str, RunRecord]]) -> DefaultPort:
        """Fit the three stages on (task, record) pairs; their conditions are the labels."""
        usable = sorted(
            ((t, r) for t, r in records if r.ok and r.trace is not None),
            key=lambda tr: (tr[0], tr[1].spec.condition.name, tr[1].spec.seed, tr[1].spec.folder),
        )
        X = np.stack([features(run_for(r, get_task(t))) for t, r in usable])
        self._hierarchy = Hierarchy.fit(X, [r.spec.condition.name for _, r in usable])
        return self

    def prepare(self, *, store: Store | None = None, engine: Engine | None = None) -> None:
        """Fit the stages (training their runs if not stored) unless already fitted, in
        the store and on the engine ``evaluate`` hands over."""
        if self._hierarchy is None:
            if store is not None and self.store is None:
                self.store = store
            if engine is not None and self.engine is None:
                self.engine = engine
            self.fit(self.training_records())

    def diagnose(self, run: Run) -> Diagnosis:
        """Stage 1, then the flagged category and its root cause, with the deciding
        features."""
        self.prepare()
        assert self._hierarchy is not None
        return self._hierarchy.answer(features(run))


DIAGNOSERS.add(NAME, DefaultPort)
