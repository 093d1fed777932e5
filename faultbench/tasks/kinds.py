"""What a task predicts, declared once: its kind.

A :class:`Kind` says what the targets are and brings what every check below it
needs to read a run of that kind: its loss, its **score** (the metric a run is
judged by, always higher-is-better: accuracy, F1, R², exact match), the other
metrics it evaluates with their directions (:data:`METRICS`), its **chance
level** (what a constant predictor scores on the task's targets: the majority
class, the best constant label set, the mean target) and its **loss
reference** (the loss an untrained model starts near: ln C for C classes, ln 2
per label for a logits loss, the targets' variance for a squared error).

Nothing here reads a class count to decide a kind: ``Task.from_arrays`` infers
the kind from ``y`` (:func:`infer_kind`) or takes it as declared. Every kind's
metrics are computed twice, on the same definitions: on arrays for an
evaluation (:meth:`Kind.evaluate`), and as a ratio of two sums per batch for
the Monitor's per-step score (:meth:`Kind.step_parts`), so a run's step score
and its evaluation agree on what the score is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from faultbench.core.errors import FaultbenchError, unknown_name

HIGHER, LOWER = "higher", "lower"
#: Every metric a kind evaluates or a user may log, and which way is better.
METRICS: Mapping[str, str] = {
    "accuracy": HIGHER,  # share of examples (labels, for a label set) predicted right
    "f1": HIGHER,  # micro-averaged F1 of the positive labels
    "auc": HIGHER,  # area under the ROC curve of a binary score
    "r2": HIGHER,  # coefficient of determination, 1 - SSE / SST (0: the mean predictor)
    "exact_match": HIGHER,  # a sequence's answer written exactly
    "token_acc": HIGHER,  # teacher-forced next-token accuracy over the counted tokens
    "mae": LOWER,  # mean absolute error
    "mse": LOWER,  # mean squared error
    "rmse": LOWER,  # root mean squared error
    "loss": LOWER,  # the training loss on the split
}
SPLITS = ("train", "val")  # a logged metric is named <split>_<metric>: val_r2, train_f1
#: The names the first Monitor API took, and the metric each one is.
LEGACY = {
    "train_acc": "train_accuracy",
    "val_acc": "val_accuracy",
    "val_token_acc": "val_token_acc",
}
IGNORE_INDEX = -100  # a class-index target the loss skips (torch's cross_entropy default)
EPS = 1e-12  # keeps a ratio of sums defined on a batch with no spread
#: A float target vector with at most this many distinct values, each repeated ten times
#: or more on average, may be class labels as well as a regression: it is refused as ambiguous.
MAX_CLASS_VALUES = 20


def direction(metric: str) -> str:
    """``"higher"`` or ``"lower"`` for a metric name (bare or ``<split>_<metric>``), ``""``
    for a name nothing here knows (recorded, never read by a check)."""
    split, _, bare = metric.partition("_")
    return METRICS.get(bare if split in SPLITS else metric, "")


@dataclass(frozen=True)
class Kind:
    """What a task predicts, and how a run of it is read."""

    name: str  # "multiclass", "binary", "multilabel", "regression", "reconstruction", ...
    summary: str  # what the targets are, in one line
    score: str  # the metric a run is judged by (higher is better)
    metrics: tuple[str, ...]  # every metric an evaluation of this kind reports, score first
    loss_name: str  # the loss a healthy run of this kind trains with
    float_targets: bool  # targets are float arrays (else int64 class indices)

    def loss(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The kind's healthy loss, a module-level torch function (a probe pickles it)."""
        return _LOSSES[self.loss_name]

    def chance(self, y: np.ndarray) -> float:
        """The score of the best constant predictor on targets ``y``."""
        return float(_CHANCE[self.name](np.asarray(y)))

    def loss_reference(self, y: np.ndarray, n_outputs: int) -> float:
        """The loss an untrained model of ``n_outputs`` outputs starts near, on targets ``y``."""
        return float(_REFERENCE[self.name](np.asarray(y), n_outputs))

    def evaluate(self, output: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """Every metric of the kind on a model's ``output`` for targets ``y``."""
        return _EVALUATE[self.name](np.asarray(output, dtype=np.float64), np.asarray(y))

    def step_parts(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The batch's score as ``[numerator, denominator, counted]`` on the device (the score
        is their ratio; ``counted``: targets that counted), without reading anything back."""
        return _STEP[self.name](output.detach(), target.detach())

    def __str__(self) -> str:
        return self.name


# -- losses -------------------------------------------------------------------------


def logits_bce(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of logits, averaged over examples and labels."""
    return F.binary_cross_entropy_with_logits(output, target)


_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cross_entropy": F.cross_entropy,
    "bce_with_logits": logits_bce,
    "mse": F.mse_loss,
}


# -- chance levels and loss references ---------------------------------------------


def _majority_share(y: np.ndarray) -> float:
    counted = y[y != IGNORE_INDEX] if y.dtype.kind in "iu" else y
    if counted.size == 0:
        return math.nan
    _, counts = np.unique(
        counted.round() if counted.dtype.kind == "f" else counted, return_counts=True
    )
    return float(counts.max() / counts.sum())


def _best_constant_f1(y: np.ndarray) -> float:
    # A constant label set scores best by predicting every label (F1 = 2p / (1 + p), p the
    # positive share) or none (F1 = 0): predicting every label wins whenever p > 0.
    p = float((y > 0.5).mean()) if y.size else math.nan
    return 2 * p / (1 + p) if p > 0 else 0.0


def _variance(y: np.ndarray) -> float:
    y2 = y.reshape(len(y), -1).astype(np.float64)
    return float(y2.var(axis=0).mean()) if len(y2) else math.nan


_CHANCE: dict[str, Callable[[np.ndarray], float]] = {
    "multiclass": _majority_share,
    "binary": _majority_share,
    "multilabel": _best_constant_f1,
    "regression": lambda y: 0.0,  # the mean predictor's R²
    "reconstruction": lambda y: 0.0,
    "next_token": lambda y: 0.0,  # no constant writes an answer
}
_REFERENCE: dict[str, Callable[[np.ndarray, int], float]] = {
    "multiclass": lambda y, c: math.log(max(2, c)),
    "binary": lambda y, c: math.log(2),
    "multilabel": lambda y, c: math.log(2),
    "regression": lambda y, c: _variance(y),
    "reconstruction": lambda y, c: _variance(y),
    "next_token": lambda y, c: math.log(max(2, c)),
}


# -- evaluations on arrays -----------------------------------------------------------


def _classes(output: np.ndarray, y: np.ndarray) -> dict[str, float]:
    counted = y != IGNORE_INDEX
    hits = (output.argmax(-1) == y) & counted
    return {"accuracy": float(hits.sum() / max(1, counted.sum()))}


def _f1(predicted: np.ndarray, truth: np.ndarray) -> float:
    tp = float((predicted & truth).sum())
    wrong = float((predicted ^ truth).sum())
    return 2 * tp / (2 * tp + wrong) if tp + wrong else 1.0


def _binary(output: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import roc_auc_score  # here: `import faultbench` stays light

    score, truth = output.reshape(-1), y.reshape(-1) > 0.5
    predicted = score > 0
    auc = (
        roc_auc_score(truth, score)
        if 0 < truth.sum() < len(truth) and np.isfinite(score).all()
        else math.nan
    )
    return {
        "accuracy": float((predicted == truth).mean()),
        "f1": _f1(predicted, truth),
        "auc": float(auc),
    }


def _labels(output: np.ndarray, y: np.ndarray) -> dict[str, float]:
    predicted, truth = output > 0, y > 0.5
    return {"f1": _f1(predicted, truth), "accuracy": float((predicted == truth).mean())}


def _r2(output: np.ndarray, y: np.ndarray) -> float:
    # Per target column against its own mean, pooled: scikit-learn's r2_score with
    # multioutput="variance_weighted" (one number, a column's spread its weight).
    y2, out2 = y.reshape(len(y), -1), output.reshape(len(y), -1)
    sse = float(((y2 - out2) ** 2).sum())
    sst = float(((y2 - y2.mean(axis=0)) ** 2).sum())
    return 1.0 - sse / sst if sst > 0 else math.nan


def _values(output: np.ndarray, y: np.ndarray) -> dict[str, float]:
    err = output.reshape(len(y), -1) - y.reshape(len(y), -1)
    mse = float((err**2).mean())
    return {"r2": _r2(output, y), "mae": float(np.abs(err).mean()), "rmse": math.sqrt(mse)}


_EVALUATE: dict[str, Callable[[np.ndarray, np.ndarray], dict[str, float]]] = {
    "multiclass": _classes,
    "binary": _binary,
    "multilabel": _labels,
    "regression": _values,
    "reconstruction": _values,
    "next_token": _classes,
}


# -- per-step scores on the device -------------------------------------------------


def _class_parts(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    counted = target != IGNORE_INDEX
    hits = ((output.argmax(-1) == target) & counted).sum()
    n = counted.sum()
    return torch.stack([hits, n, n]).to(_wide(output))


def _binary_parts(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    hits = ((output.reshape(target.shape) > 0) == (target > 0.5)).sum()
    n = torch.tensor(target.numel(), device=target.device)
    return torch.stack([hits, n, n]).to(_wide(output))


def _label_parts(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    predicted, truth = output > 0, target > 0.5
    tp = (predicted & truth).sum()
    wrong = (predicted ^ truth).sum()
    n = torch.tensor(target.numel(), device=target.device)
    return torch.stack([2 * tp, 2 * tp + wrong, n]).to(_wide(output))


def _value_parts(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    wide = _wide(output)
    y = target.reshape(len(target), -1).to(wide)
    out = output.reshape(len(target), -1).to(wide)
    sst = ((y - y.mean(dim=0)) ** 2).sum()
    sse = ((y - out) ** 2).sum()
    n = torch.tensor(float(y.numel()), dtype=wide, device=y.device)
    return torch.stack([sst - sse, sst + EPS, n])


def _wide(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.device.type == "cpu" else torch.float32  # MPS has no float64


_STEP: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "multiclass": _class_parts,
    "binary": _binary_parts,
    "multilabel": _label_parts,
    "regression": _value_parts,
    "reconstruction": _value_parts,
    "next_token": _class_parts,
}


# -- the kinds ---------------------------------------------------------------------

MULTICLASS = Kind(
    "multiclass",
    "one class of C per example (integer class indices)",
    "accuracy",
    ("accuracy",),
    "cross_entropy",
    False,
)
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        MULTICLASS,
        Kind(
            "binary",
            "one yes/no label per example (0/1 floats, one logit out)",
            "accuracy",
            ("accuracy", "f1", "auc"),
            "bce_with_logits",
            True,
        ),
        Kind(
            "multilabel",
            "a set of labels per example (a 0/1 matrix, one logit per label)",
            "f1",
            ("f1", "accuracy"),
            "bce_with_logits",
            True,
        ),
        Kind(
            "regression",
            "one or several real-valued targets per example",
            "r2",
            ("r2", "mae", "rmse"),
            "mse",
            True,
        ),
        Kind(
            "reconstruction",
            "the input itself, through a narrower representation (an autoencoder)",
            "r2",
            ("r2", "mae", "rmse"),
            "mse",
            True,
        ),
        Kind(
            "next_token",
            "the next token at every counted position of a sequence",
            "exact_match",
            ("exact_match", "token_acc"),
            "cross_entropy",
            False,
        ),
    )
}


def get_kind(kind: str | Kind) -> Kind:
    """``kind`` itself, or the kind of that name.

    Raises:
        FaultbenchError: an unknown name (with the nearest one).
    """
    if isinstance(kind, Kind):
        return kind
    if kind not in KINDS:
        raise unknown_name("task kind", str(kind), KINDS)
    return KINDS[kind]


def infer_kind(y: np.ndarray) -> Kind:
    """The kind of targets ``y``: integer or string labels -> classes (declare ``binary`` for
    one logit); a float vector -> regression; a 0/1 matrix -> multi-label; another float matrix ->
    regression of several targets.

    Raises:
        FaultbenchError: targets no kind fits (3-D arrays), a missing (NaN) float target,
            or a float vector of few distinct values (classes or a regression?).
    """
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.dtype.kind in "fiub":
        values = np.unique(arr)
        binary = arr.shape[1] > 1 and np.isin(values, (0, 1)).all()
        return KINDS["multilabel" if binary else "regression"]
    if arr.ndim != 1:
        raise FaultbenchError(
            f"y has shape {arr.shape}; expected one label per row (1-D) or a matrix of targets "
            "(2-D), or declare kind= (one of " + ", ".join(KINDS) + ")"
        )
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            row = int(np.argmax(bad))
            raise FaultbenchError(
                f"y has a missing label ({arr[row]}) at row {row} ({int(bad.sum())} in all); "
                "expected a label or target for every row"
            )
        distinct = len(np.unique(arr))
        if distinct <= MAX_CLASS_VALUES and distinct * 10 <= len(arr):
            raise FaultbenchError(
                f"y holds {distinct} distinct float values over {len(arr)} rows: class labels "
                "or a regression target? Pass kind='multiclass' (or 'binary') or "
                "kind='regression'"
            )
        return KINDS["regression"]
    return MULTICLASS


# -- what a user's loop says of its kind -------------------------------------------

#: The kinds that log each metric, the kind whose score it is first: a logged ``val_r2`` says
#: a regression (or a reconstruction), ``val_f1`` labels. Names every kind logs (accuracy,
#: loss) say nothing and are not here.
METRIC_KINDS: Mapping[str, tuple[str, ...]] = {
    "r2": ("regression", "reconstruction"),
    "mae": ("regression", "reconstruction"),
    "mse": ("regression", "reconstruction"),
    "rmse": ("regression", "reconstruction"),
    "f1": ("multilabel", "binary"),
    "auc": ("binary",),
    "exact_match": ("next_token",),
    "token_acc": ("next_token",),
}
#: What the targets of a loss are, by torch's autograd node for it (the name of
#: ``type(loss.grad_fn)``): values for an error between values, labels for a binary
#: cross-entropy (of logits, or of probabilities: a sigmoid's output), classes for a
#: cross-entropy. Each with the loss's name as a user knows it.
VALUES, LOGITS, PROBABILITIES, CLASSES = "values", "logits", "probabilities", "classes"
LOSS_NODES: Mapping[str, tuple[str, str]] = {
    "MseLossBackward0": (VALUES, "an MSE loss"),
    "L1LossBackward0": (VALUES, "an L1 loss"),
    "HuberLossBackward0": (VALUES, "a Huber loss"),
    "SmoothL1LossBackward0": (VALUES, "a SmoothL1 loss"),
    "BinaryCrossEntropyWithLogitsBackward0": (LOGITS, "a BCE-with-logits loss"),
    "BinaryCrossEntropyBackward0": (PROBABILITIES, "a BCE loss (of probabilities)"),
    "NllLossBackward0": (CLASSES, "a cross-entropy loss"),
    "NllLoss2DBackward0": (CLASSES, "a cross-entropy loss"),
}
#: How to tell the Monitor each kind (the targets ``monitor.step`` is given), in the order a
#: user is told them when the kind cannot be inferred.
DECLARE: Mapping[str, str] = {
    "regression": "real values",
    "multiclass": "class indices",
    "binary": "0/1 labels against one logit",
    "multilabel": "a 0/1 matrix of labels, one logit each",
    "reconstruction": "the inputs themselves, an autoencoder's",
    "next_token": "a language model's next tokens",
}


def kinds_named_by(metrics: Iterable[str]) -> tuple[str, ...]:
    """The kinds that log every one of ``metrics`` (``<split>_<metric>`` or bare names), the
    likeliest first; empty where no name says a kind or the names disagree."""
    named = [METRIC_KINDS[bare] for bare in map(_bare, metrics) if bare in METRIC_KINDS]
    if not named:
        return ()
    return tuple(k for k in named[0] if all(k in kinds for kinds in named[1:]))


def _bare(metric: str) -> str:
    split, _, bare = metric.partition("_")
    return bare if split in SPLITS else metric
