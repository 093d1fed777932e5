"""``umlaut``: UMLAUT's heuristics, ported with their published thresholds.

Schoop, Huang and Hartmann, "UMLAUT: Debugging Deep Learning Programs using Program
Structure, Model Behavior, and Electronic Health Records" (the "UMLAUT" tool), CHI 2021;
repository ``BerkeleyHCI/umlaut`` (``umlaut/heuristics.py``: ``run_pretrain_heuristics``
and ``run_epoch_heuristics``). Written anew. In the paper's study it warned on every
program, fault-free ones included: the port keeps that behaviour.

**How it runs.** Four checks of the model's structure before training, then seven checks
at the end of every epoch; UMLAUT lists every warning, in that order. The port runs them
all over faultbench's epochs (its periodic evaluations, see
:mod:`~faultbench.diagnosers._published`) and answers with the label of the first warning,
the one a user reads first (all of them are in the evidence); no warning: healthy.

**Checks, thresholds, and how each was read for PyTorch.**

Before training (on the probe's model; leaf modules stand for Keras layers, and an
activation is its own module in PyTorch, where Keras folds it into a layer's config):

* ``no softmax``: the last layer is not a softmax and the loss does not take logits
  (Keras's ``from_logits``). The loss takes logits when it equals ``cross_entropy`` on
  random scores (one probe step); faultbench's does, so this check passes on its runs.
* ``missing activation``: a Linear or convolution layer, other than the last weighted
  one, not followed directly by an activation module (Keras: a layer whose activation is
  ``linear``, the layer before a final softmax excepted).
* ``final layer activation``: the last layer, a final softmax skipped, is an activation.
* ``high dropout``: a dropout rate above 0.5.

Each epoch:

* ``input shape``: a 4-D input whose two spatial sides differ (PyTorch is
  channels-first: N, C, H, W).
* ``input not normalized``: an input below −1 or above 1 (the trace's first batch:
  |x| max > 1). faultbench standardizes its inputs, so this fires on nearly every run.
* ``input not floating``: the probe's inputs are not floating point.
* ``nan in input``: the epoch's loss is NaN and the inputs hold a NaN.
* ``learning rate high`` / ``learning rate low``: lr > 0.01 or lr < 1e-7.
* ``overfitting``: from the second epoch, validation loss rose while training loss
  did not.
* ``overconfident validation``: from epoch 3 (0-based), validation accuracy above 0.95,
  or more than 0.05 above training accuracy.

Without a probe the structure, shape, type and NaN checks are skipped (``missing``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from faultbench.diagnosers._published import (
    HEALTHY,
    NO_SYMPTOM,
    OTHER_FAULT,
    WEIGHTED,
    Epochs,
    Finding,
    answer,
    epochs,
    is_activation,
    is_softmax,
    leaves,
)
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Probe, Run

LR_HIGH = 0.01  # check_learning_rate_range
LR_LOW = 1e-7
INPUT_BOUND = 1.0  # check_input_normalization: inputs within [-1, 1]
MAX_DROPOUT = 0.5  # check_dropout_p_less_than_half
VAL_ACC_HIGH = 0.95  # check_high_validation_acc
VAL_OVER_TRAIN = 0.05
QUIET_EPOCHS = 3  # the validation-accuracy check ignores epochs before this one
DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)
LOGITS_TOLERANCE = 1e-5  # the loss equals cross_entropy on logits to float precision

#: UMLAUT's error class -> faultbench's label (see docs/ports.md).
SYMPTOMS: dict[str, str] = {
    "no softmax": "softmax_before_loss",  # the output and the loss disagree
    "missing activation": OTHER_FAULT,
    "final layer activation": "softmax_before_loss",  # an activation on the output
    "high dropout": OTHER_FAULT,
    "input shape": OTHER_FAULT,
    "input not normalized": "huge_inputs",
    "input not floating": OTHER_FAULT,
    "nan in input": OTHER_FAULT,
    "learning rate high": "lr_too_high",
    "learning rate low": OTHER_FAULT,
    "overfitting": OTHER_FAULT,
    "overconfident validation": OTHER_FAULT,
    NO_SYMPTOM: HEALTHY,
}

#: Every rule the port can name in ``evidence["fired"]``.
RULES: tuple[str, ...] = tuple(s for s in SYMPTOMS if s != NO_SYMPTOM)


# -- before training ------------------------------------------------------------------


def takes_logits(probe: Probe, n_classes: int) -> bool:
    """Whether the run's loss is cross-entropy on logits (Keras's ``from_logits=True``)."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(8, n_classes, generator=generator)
    target = torch.randint(n_classes, (8,), generator=generator)
    with torch.no_grad():
        theirs = float(probe.loss(scores, target))
    return math.isclose(theirs, float(F.cross_entropy(scores, target)), abs_tol=LOGITS_TOLERANCE)


def no_softmax(model_leaves: list[tuple[str, nn.Module]], logits: bool) -> Finding:
    """The last layer is not a softmax and the loss does not take logits."""
    softmax_last = bool(model_leaves) and is_softmax(*model_leaves[-1])
    return Finding(
        not softmax_last and not logits, {"softmax_last": softmax_last, "logits_loss": logits}
    )


def missing_activation(model_leaves: list[tuple[str, nn.Module]]) -> Finding:
    """A weighted layer (not the last) not followed by an activation module."""
    weighted = [i for i, (_, m) in enumerate(model_leaves) if isinstance(m, WEIGHTED)]
    bare = [
        model_leaves[i][0]
        for i in weighted[:-1]
        if not (i + 1 < len(model_leaves) and is_activation(model_leaves[i + 1][1]))
    ]
    return Finding(bool(bare), {"layers": bare})


def final_layer_activation(model_leaves: list[tuple[str, nn.Module]]) -> Finding:
    """The last layer (a final softmax skipped) is an activation."""
    rest = model_leaves[:-1] if model_leaves and is_softmax(*model_leaves[-1]) else model_leaves
    last = rest[-1] if rest else None
    fired = last is not None and is_activation(last[1])
    return Finding(fired, {"layer": last[0] if last else None})


def high_dropout(model_leaves: list[tuple[str, nn.Module]]) -> Finding:
    """A dropout layer (not the last) with a rate above 0.5."""
    high = {
        n: float(m.p) for n, m in model_leaves[:-1] if isinstance(m, DROPOUT) and m.p > MAX_DROPOUT
    }
    return Finding(bool(high), {"rates": high})


def pretrain(run: Run) -> Iterator[tuple[str, Finding]]:
    """The structure checks, in UMLAUT's order."""
    assert run.probe is not None
    model_leaves = leaves(run.probe.make_model())
    yield "no softmax", no_softmax(model_leaves, takes_logits(run.probe, run.config.n_classes))
    yield "missing activation", missing_activation(model_leaves)
    yield "final layer activation", final_layer_activation(model_leaves)
    yield "high dropout", high_dropout(model_leaves)


# -- each epoch -------------------------------------------------------------------------


def input_shape(X: torch.Tensor) -> Finding:
    """A 4-D input whose spatial sides differ."""
    shape = tuple(X.shape)
    return Finding(len(shape) == 4 and shape[2] != shape[3], {"shape": list(shape)})


def input_not_normalized(run: Run) -> Finding:
    """An input outside [-1, 1] in the first batch."""
    top = float(run.trace.input_stats.get("abs_max", math.nan))
    return Finding(top > INPUT_BOUND, {"abs_max": top})


def input_not_floating(X: torch.Tensor) -> Finding:
    """The inputs are not floating point."""
    return Finding(not X.is_floating_point(), {"dtype": str(X.dtype)})


def nan_in_input(loss: float, X: torch.Tensor) -> Finding:
    """The epoch's loss is NaN and so is some input."""
    nan_x = X.is_floating_point() and bool(torch.isnan(X).any())
    return Finding(math.isnan(loss) and nan_x, {"loss": loss})


def learning_rate(run: Run) -> tuple[Finding, Finding]:
    """The learning rate above 0.01, or below 1e-7."""
    lr = run.config.lr
    return Finding(lr > LR_HIGH, {"lr": lr}), Finding(lr < LR_LOW, {"lr": lr})


def overfitting(h: Epochs, epoch: int) -> Finding:
    """Validation loss rose over the epoch while training loss did not."""
    if epoch == 0:
        return Finding(False)
    d_loss = float(h.loss[epoch] - h.loss[epoch - 1])
    d_val = float(h.val_loss[epoch] - h.val_loss[epoch - 1])
    return Finding(d_val > 0 and d_loss <= 0, {"d_loss": d_loss, "d_val_loss": d_val})


def overconfident_validation(h: Epochs, epoch: int) -> Finding:
    """From epoch 3: validation accuracy above 0.95, or 0.05 above training accuracy."""
    if epoch < QUIET_EPOCHS:
        return Finding(False)
    val, train = float(h.val_acc[epoch]), float(h.acc[epoch])
    return Finding(
        val > VAL_ACC_HIGH or val - train > VAL_OVER_TRAIN, {"val_acc": val, "acc": train}
    )


def epoch_checks(run: Run, h: Epochs, epoch: int) -> Iterator[tuple[str, Finding]]:
    """The per-epoch checks, in UMLAUT's order (input ones only with a probe)."""
    X = run.probe.train_data(run.config.batch_size)[0] if run.probe is not None else None
    if X is not None:
        yield "input shape", input_shape(X)
    yield "input not normalized", input_not_normalized(run)
    if X is not None:
        yield "input not floating", input_not_floating(X)
        yield "nan in input", nan_in_input(float(h.loss[epoch]), X)
    high, low = learning_rate(run)
    yield "learning rate high", high
    yield "learning rate low", low
    yield "overfitting", overfitting(h, epoch)
    yield "overconfident validation", overconfident_validation(h, epoch)


def warnings(run: Run) -> Iterator[tuple[str, str, Finding]]:
    """Every check as UMLAUT runs them: (when, check, finding)."""
    if run.probe is not None:
        yield from (("before training", name, f) for name, f in pretrain(run))
    h = epochs(run.trace)
    for epoch in range(len(h)):
        yield from ((f"epoch {epoch}", name, f) for name, f in epoch_checks(run, h, epoch))


@DIAGNOSERS.register("umlaut")
class Umlaut:
    """UMLAUT's heuristics (CHI 2021), published thresholds; answers its first warning."""

    name = "umlaut"
    probes = True  # reads the model's structure and inputs and asks the loss one question
    tuned_on: frozenset[str] | set[str] = frozenset()

    def diagnose(self, run: Run) -> Diagnosis:
        """List every warning; the first one is the answer."""
        raised: list[tuple[str, str, dict[str, Any]]] = [
            (when, name, f.evidence) for when, name, f in warnings(run) if f.fired
        ]
        missing = [] if run.probe is not None else ["probe"]
        if not raised:
            return answer(
                SYMPTOMS, NO_SYMPTOM, rule="no warning", fired=[], evidence={}, missing=missing
            )
        when, first, numbers = raised[0]
        return answer(
            SYMPTOMS,
            first,
            rule=first,
            fired=[name for _, name, _ in raised],
            evidence={
                "when": when,
                "numbers": numbers,
                "warnings": len(raised),
                "first_of_each": _first_of_each(raised),
            },
            missing=missing,
        )


def _first_of_each(raised: list[tuple[str, str, dict[str, Any]]]) -> dict[str, str]:
    seen: dict[str, str] = {}
    for when, name, _ in raised:
        seen.setdefault(name, when)
    return seen
