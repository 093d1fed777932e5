"""``deepdiagnosis``: DeepDiagnosis's symptom checks and fixes, ported with published defaults.

Wardat, Cruz, Le and Rajan, "DeepDiagnosis: Automatically Diagnosing Faults and
Recommending Actionable Fixes in Deep Learning Programs", ICSE 2022; repository
``DeepDiagnosis/ICSE2022`` (``callback/callbacks.py``: ``mapFaluireToFix`` with N = 5,
FRQ = 20, the ``identify*`` checks and the ``*Analysis`` fix recommenders). Written anew.

**How it runs.** A Keras callback checks at the end of every epoch, in a fixed order,
and stops training at the first symptom, reporting it with a fix. The port walks
faultbench's epochs (its periodic evaluations; see :mod:`~faultbench.diagnosers._published`)
in the same order and answers with the fix's label when the fix names one of
faultbench's faults, else with the symptom's (tables in docs/ports.md). Per epoch:

1. Forward, per layer (a leaf module, Keras's layer): output range (first epoch, last
   layer), numerical error (mean output NaN, infinite or exactly 0), dead ReLU (last
   epoch), saturation (every N epochs, a layer feeding a sigmoid or tanh).
2. Every N = 5 epochs: an unchanged forward output (layers other than the last;
   flatten layers skipped, as published).
3. Metrics: invalid loss (NaN, infinite), loss not decreasing (every N epochs, the
   last N epoch losses identical), invalid accuracy (NaN, infinite or 0), accuracy not
   increasing (every FRQ = 20 epochs, the last 20 identical: faultbench's ten epochs
   never reach it, nor would ten Keras epochs). "Identical" is the published
   ``mean == max``, compared exactly.
4. Per weighted layer, output side first: numerical error in the gradient (its mean
   NaN, infinite or 0), vanishing gradient (mean |∇W| < 1e-7), numerical error in the
   weights (mean NaN, infinite or 0).
5. Every N epochs, per weighted layer, output side first: unchanged gradient, then
   unchanged weights (the last N epochs' values identical).

**Thresholds** (module constants of callbacks.py): dead ReLU when ≥ 70% of a ReLU
layer's outputs are ≤ 0; saturation when > 50% of the pre-activations are beyond ±5;
vanishing below 1e-7. Fixes: weight variance (ddof 1) outside [1e-5, 10] → poor
weights; any training input outside [−1, 1] → normalize the data;
lr·‖∇W‖/‖W‖ outside [1e-3/100, 1e-3·100] → the learning rate (split by side, since
faultbench's rate fault is a high rate); else the published last resort of each analysis
(change the optimizer, an activation, add dropout, ...).

**How the Keras rules were read.**

* *Output range.* Keras's cross-entropy takes probabilities, so DeepDiagnosis flags a
  last layer that is not a softmax. PyTorch's ``cross_entropy`` takes logits, so the same
  mismatch is a last layer that *is* an activation (a Softmax, Sigmoid, ...): that is
  the check here, read off the probe's model. The invalid-accuracy fix reads the same way.
* *Unchanged tensors.* DeepDiagnosis compares per-epoch means on the first batch; they
  are identical over N epochs exactly when the parameters they depend on did not move.
  The trace's per-step update ratios say that: a layer's weights are unchanged when its
  updates were all exactly 0 in those epochs; a layer's output, when every parameterized
  layer up to it was; a gradient, when every parameterized layer was.
* *Internals at the first epoch* (layer outputs, gradients, weights of the first batch)
  come from the probe's initialized model. *Later epochs* read the Monitor's per-module
  series at the step each epoch ends (the last recorded step before it: the trace's
  ``stat_steps`` say which were recorded): the activation modules' ``activation_mean_abs``,
  ``nonpositive_share`` and ``saturated_share``, and each layer's ``grad_mean_abs``; a
  mean |·| is NaN, infinite or 0 exactly when the signed mean DeepDiagnosis reads is,
  barring exact cancellation. A layer without such a series (the Monitor records the
  output statistics of activation modules only) has its check skipped and listed under
  ``missing``. The weights' numerical check runs at the first epoch (probe) and the last
  (the trace's final weight change). An unchanged-tensor check over epochs in which no
  update was recorded (a sparse sampling) is skipped, not read as "no update".

Not ported: DeepLocalize's per-batch variant; the published code's slips are read for
their intent (the learning-rate ratio is computed from each layer's weight matrix, and
the loss analysis is called with its file argument, whose absence would have crashed it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from torch import nn

from faultbench.diagnosers._published import (
    ACTIVATION_STATS,
    GRAD_MEAN_ABS,
    HEALTHY,
    NO_SYMPTOM,
    OTHER_FAULT,
    RELU_FAMILY,
    SATURATING,
    Epochs,
    FirstBatch,
    answer,
    epochs,
    first_batch,
    is_activation,
    leaves,
    module_stat,
    recorded_between,
    value_at,
    weighted_layers,
)
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Run

N = 5  # epochs between the unchanged-tensor and loss checks
FRQ = 20  # epochs between the accuracy checks
DEAD_SHARE = 0.7  # threshold_layer_1: share of ReLU outputs <= 0
SATURATION = 5.0  # min/max_threshold_sigmoid and _tanh
SATURATED_SHARE = 0.5  # threshold_layer: share of pre-activations beyond +-SATURATION
VANISHING = 1e-7  # threshold_VG: mean |gradient|
WEIGHT_VARIANCE = (1e-5, 10.0)  # identifyTensorVariance's min_threshold, max_threshold
LR_THRESHOLD = 1e-3  # LearnRate_threshold; the ratio is fine within /100 .. *100 of it
INPUT_BOUND = 1.0  # inputs outside [-1, 1]: normalize the data

#: DeepDiagnosis's symptom -> faultbench's label, when the fix names no fault.
SYMPTOMS: dict[str, str] = {
    "out of range": "softmax_before_loss",
    "numerical error in forward": "lr_too_high",
    "dead node": "dead_units",
    "saturated activation": OTHER_FAULT,
    "unchanged forward": "frozen_layer",
    "invalid loss": "lr_too_high",
    "loss not decreasing": OTHER_FAULT,
    "invalid accuracy": OTHER_FAULT,
    "accuracy not increasing": OTHER_FAULT,
    "numerical error in gradients": "lr_too_high",
    "vanishing gradient": OTHER_FAULT,
    "numerical error in weights": "lr_too_high",
    "unchanged gradients": "frozen_layer",
    "unchanged weights": "frozen_layer",
    NO_SYMPTOM: HEALTHY,
}
#: DeepDiagnosis's fix -> faultbench's label; None: the fix names no fault, the symptom decides.
FIXES: dict[str, str | None] = {
    "normalize the data": "huge_inputs",
    "learning rate (ratio above 1e-1)": "lr_too_high",
    "learning rate (ratio below 1e-5)": OTHER_FAULT,
    "poor weight initialization": OTHER_FAULT,
    "change the output activation": "softmax_before_loss",
    "change the loss or the output activation": "softmax_before_loss",
    "change a hidden activation": None,
    "change the optimizer": None,
    "add dropout or a missing activation": None,
    "add or delete layers, or change the sigmoid": None,
    "no fix recommended": None,  # the gradient of the last layer: the analysis says nothing
}


#: Every rule the port can name in ``evidence["fired"]``: the symptoms, then the fixes.
RULES: tuple[str, ...] = (
    *(s for s in SYMPTOMS if s != NO_SYMPTOM),
    *(f"fix: {f}" for f in FIXES),
)


@dataclass(frozen=True)
class Context:
    """What the checks read: the history, the probe's first batch, the model's layers."""

    run: Run  # the run
    history: Epochs  # the per-epoch history
    batch: FirstBatch | None  # the initialized model on the first batch (None: no probe)
    layers: list[tuple[str, nn.Module]]  # leaf modules, input side first
    weighted: list[str]  # the Linear and convolution leaves, input side first
    inputs_outside: bool  # some training input outside [-1, 1]
    # Per weighted leaf: the name its weight is stored under in the first batch's params
    # and grads (a weight tied to another module's, an lm_head's, under that module's).
    weight_of: dict[str, str]

    def kernel(self, table: dict[str, np.ndarray], name: str) -> np.ndarray:
        """Weighted leaf ``name``'s weight (or gradient) in ``table``: a tied weight is one
        parameter, stored once."""
        return table[self.weight_of.get(name, f"{name}.weight")]

    @property
    def last_epoch(self) -> int:
        return len(self.history) - 1


@dataclass(frozen=True)
class Symptom:
    """A check that fired: what it saw, where, and the fix DeepDiagnosis recommends."""

    name: str  # a key of SYMPTOMS
    where: str  # the layer (or "metrics")
    fix: str  # a key of FIXES
    numbers: dict[str, object]  # what it compared


# -- the fix recommenders -----------------------------------------------------------


def _poor_weights(ctx: Context) -> str | None:
    if ctx.batch is None:
        return None
    for name in ctx.weighted:
        w = ctx.kernel(ctx.batch.params, name).ravel()
        var = float(np.var(w, ddof=1)) if w.size > 1 else math.nan
        if var < WEIGHT_VARIANCE[0] or var > WEIGHT_VARIANCE[1]:
            return "poor weight initialization"
    return None


def lr_ratios(ctx: Context) -> dict[str, float]:
    """Per weighted layer: lr * |grad W| / |W| on the first batch (identifyLearnRate)."""
    if ctx.batch is None:
        return {}
    out = {}
    for name in ctx.weighted:
        w, g = ctx.kernel(ctx.batch.params, name), ctx.kernel(ctx.batch.grads, name)
        norm = float(np.linalg.norm(w))
        out[name] = ctx.run.config.lr * float(np.linalg.norm(g)) / norm if norm else math.inf
    return out


def _learning_rate(ctx: Context) -> str | None:
    for ratio in lr_ratios(ctx).values():
        if ratio > LR_THRESHOLD * 100:
            return "learning rate (ratio above 1e-1)"
        if ratio < LR_THRESHOLD / 100:
            return "learning rate (ratio below 1e-5)"
    return None


def _data(ctx: Context) -> str | None:
    return "normalize the data" if ctx.inputs_outside else None


def _output_mismatch(ctx: Context) -> bool:
    return bool(ctx.layers) and is_activation(ctx.layers[-1][1])


def _first(ctx: Context, *steps: Callable[[Context], str | None], last: str) -> str:
    for step in steps:
        fix = step(ctx)
        if fix is not None:
            return fix
    return last


def _activation_at(ctx: Context, index: int) -> str:
    last = len(ctx.layers) - 1
    return "change the output activation" if index >= last else "change a hidden activation"


def recommend(ctx: Context, analysis: str, index: int = 0) -> str:
    """The fix of one of DeepDiagnosis's ``*Analysis`` functions for layer ``index``."""
    last = len(ctx.layers) - 1
    if analysis == "numerical FW/W":
        return _first(
            ctx, _poor_weights, _data, _learning_rate, last=_activation_at(ctx, index + 1)
        )
    if analysis == "numerical DW":
        if index + 1 == last:
            return "change the loss or the output activation"
        return _activation_at(ctx, index + 1) if index < last else "no fix recommended"
    if analysis == "unchanged FW" and index == last:
        return "change the output activation"
    if analysis in ("unchanged FW", "unchanged W/DW"):
        return _first(ctx, _poor_weights, _learning_rate, last="change the optimizer")
    if analysis == "accuracy":
        return _first(ctx, _poor_weights, _data, _learning_rate, last="change the optimizer")
    if analysis == "accuracy invalid":
        if _output_mismatch(ctx):
            return "change the output activation"
        return _first(ctx, _learning_rate, last="change the optimizer")
    if analysis in ("dead", "saturated"):
        return _first(
            ctx, _data, _poor_weights, _learning_rate, last="add dropout or a missing activation"
        )
    if analysis == "vanishing":
        return _first(ctx, _learning_rate, last="add or delete layers, or change the sigmoid")
    if analysis == "out of range":
        return "change the output activation"
    raise ValueError(f"unknown analysis {analysis!r}")


# -- what each epoch offers ---------------------------------------------------------


def leaf_value(ctx: Context, epoch: int, index: int, stat: str) -> float | None:
    """A layer's statistic at ``epoch``: the probe's at the first, the trace's after.

    ``stat`` is ``mean`` (signed from the probe, mean |.| from the trace),
    ``nonpositive_share`` or ``saturated_share`` (of this layer's inputs, for a
    sigmoid or tanh layer). None when the run does not offer it.
    """
    name, _ = ctx.layers[index]
    if epoch == 0:
        if ctx.batch is None or name not in ctx.batch.outputs:
            return None
        out = ctx.batch.outputs[name]
        if stat == "mean":
            return float(np.mean(out))
        if stat == "nonpositive_share":
            return float(np.mean(out <= 0))
        before = ctx.batch.outputs.get(ctx.layers[index - 1][0]) if index > 0 else None
        return None if before is None else float(np.mean(np.abs(before) >= SATURATION))
    series = module_stat(
        ctx.run.trace, ACTIVATION_STATS["mean_abs" if stat == "mean" else stat], name
    )
    if series is None:
        return None
    return value_at(ctx.run.trace, series, int(ctx.history.end_step[epoch]))


def grad_values(ctx: Context, epoch: int, name: str) -> tuple[float, float] | None:
    """(mean gradient, mean |gradient|) of a weighted layer's kernel at ``epoch``."""
    if epoch == 0:
        if ctx.batch is None:
            return None
        g = ctx.kernel(ctx.batch.grads, name)
        return float(np.mean(g)), float(np.mean(np.abs(g)))
    series = module_stat(ctx.run.trace, GRAD_MEAN_ABS, name)
    if series is None:
        return None
    value = value_at(ctx.run.trace, series, int(ctx.history.end_step[epoch]))
    return value, value


def _numerical(value: float) -> bool:
    return not math.isfinite(value) or value == 0


def unmoved(ctx: Context, epoch: int, names: list[str]) -> bool | None:
    """Whether none of ``names`` moved in the last N epochs (None: one is not recorded).

    Reads the updates recorded in those epochs (the trace's ``stat_steps``): a
    window without any recorded update says nothing, rather than "no update".
    """
    ends = ctx.history.end_step
    after, upto = int(ends[epoch - N + 1]), int(ends[epoch])
    for name in names:
        ratios = ctx.run.trace.update_ratio.get(name)
        if ratios is None:
            return None
        window = recorded_between(ctx.run.trace, ratios, after, upto)
        if not len(window):
            return None
        if not np.all(window == 0):
            return False
    return True


def _params_upto(ctx: Context, index: int) -> list[str]:
    return [n for n, m in ctx.layers[: index + 1] if any(True for _ in m.parameters())]


# -- the checks, epoch by epoch ---------------------------------------------------------


def forward_checks(ctx: Context, epoch: int, missing: list[str]) -> Iterator[Symptom]:
    """Step 1: each layer's output range, numerical error, dead units and saturation."""
    last = len(ctx.layers) - 1
    for k, (name, module) in enumerate(ctx.layers):
        if k == last and epoch == 0 and _output_mismatch(ctx):
            yield Symptom("out of range", name, recommend(ctx, "out of range"), {})
        mean = leaf_value(ctx, epoch, k, "mean")
        if mean is None:
            missing.append(f"activation_mean_abs[{name}]")
        elif _numerical(mean):
            yield Symptom(
                "numerical error in forward",
                name,
                recommend(ctx, "numerical FW/W", k),
                {"mean": mean},
            )
        if isinstance(module, RELU_FAMILY) and epoch == ctx.last_epoch:
            share = leaf_value(ctx, epoch, k, "nonpositive_share")
            if share is None:
                missing.append(f"nonpositive_share[{name}]")
            elif share >= DEAD_SHARE:
                yield Symptom(
                    "dead node", name, recommend(ctx, "dead", k), {"nonpositive_share": share}
                )
        if (epoch + 1) % N == 0 and k < last and isinstance(ctx.layers[k + 1][1], SATURATING):
            share = leaf_value(ctx, epoch, k + 1, "saturated_share")
            if share is None:
                missing.append(f"saturated_share[{ctx.layers[k + 1][0]}]")
            elif share > SATURATED_SHARE:
                yield Symptom(
                    "saturated activation",
                    name,
                    recommend(ctx, "saturated", k),
                    {"saturated_share": share},
                )


def unchanged_forward(ctx: Context, epoch: int, missing: list[str]) -> Iterator[Symptom]:
    """Step 2 (every N epochs): a layer's output did not change."""
    if (epoch + 1) % N:
        return
    for k, (name, module) in enumerate(ctx.layers[:-1]):
        if "flatten" in name.lower() or "flatten" in type(module).__name__.lower():
            continue
        still = unmoved(ctx, epoch, _params_upto(ctx, k))
        if still is None:
            missing.append(f"update_ratio for the layers up to {name}")
        elif still:
            yield Symptom("unchanged forward", name, recommend(ctx, "unchanged FW", k), {})


def metric_checks(ctx: Context, epoch: int) -> Iterator[Symptom]:
    """Step 3: the epoch's loss and accuracy."""
    h = ctx.history
    loss, acc = float(h.loss[epoch]), float(h.acc[epoch])
    if not math.isfinite(loss):
        yield Symptom("invalid loss", "metrics", recommend(ctx, "accuracy invalid"), {"loss": loss})
    if (epoch + 1) % N == 0 and _all_identical(h.loss[epoch - N + 1 : epoch + 1]):
        yield Symptom("loss not decreasing", "metrics", recommend(ctx, "accuracy"), {"loss": loss})
    if not math.isfinite(acc) or acc == 0:
        yield Symptom(
            "invalid accuracy", "metrics", recommend(ctx, "accuracy invalid"), {"acc": acc}
        )
    if (epoch + 1) % FRQ == 0 and _all_identical(h.acc[epoch - FRQ + 1 : epoch + 1]):
        yield Symptom(
            "accuracy not increasing", "metrics", recommend(ctx, "accuracy"), {"acc": acc}
        )


def _all_identical(values: np.ndarray) -> bool:
    # meanResult: the mean equals the maximum only when all values are equal.
    return len(values) > 0 and bool(np.mean(values) == np.max(values))


def gradient_checks(ctx: Context, epoch: int, missing: list[str]) -> Iterator[Symptom]:
    """Step 4: each weighted layer's gradient and weights, output side first."""
    index = {name: k for k, (name, _) in enumerate(ctx.layers)}
    for name in reversed(ctx.weighted):
        k = index[name]
        values = grad_values(ctx, epoch, name)
        if values is None:
            missing.append(f"{GRAD_MEAN_ABS}[{name}]")
        else:
            mean, mean_abs = values
            if _numerical(mean):
                yield Symptom(
                    "numerical error in gradients",
                    name,
                    recommend(ctx, "numerical DW", k),
                    {"mean": mean},
                )
            if mean_abs < VANISHING:
                yield Symptom(
                    "vanishing gradient",
                    name,
                    recommend(ctx, "vanishing", k),
                    {"mean_abs": mean_abs},
                )
        weight = _weight_mean(ctx, epoch, name)
        if weight is not None and _numerical(weight):
            yield Symptom(
                "numerical error in weights",
                name,
                recommend(ctx, "numerical FW/W", k),
                {"mean": weight},
            )


def _weight_mean(ctx: Context, epoch: int, name: str) -> float | None:
    if epoch == 0 and ctx.batch is not None:
        return float(np.mean(ctx.kernel(ctx.batch.params, name)))
    if epoch == ctx.last_epoch and name in ctx.run.trace.weight_change:
        change = ctx.run.trace.weight_change[name]
        return 1.0 if math.isfinite(change) else math.nan  # only finiteness is known
    return None


def unchanged_checks(ctx: Context, epoch: int, missing: list[str]) -> Iterator[Symptom]:
    """Step 5 (every N epochs): unchanged gradients, then unchanged weights."""
    if (epoch + 1) % N:
        return
    index = {name: k for k, (name, _) in enumerate(ctx.layers)}
    everything = _params_upto(ctx, len(ctx.layers) - 1)
    for name in reversed(ctx.weighted):
        for symptom, names in (("unchanged gradients", everything), ("unchanged weights", [name])):
            still = unmoved(ctx, epoch, names)
            if still is None:
                missing.append(f"update_ratio for {symptom} of {name}")
            elif still:
                yield Symptom(symptom, name, recommend(ctx, "unchanged W/DW", index[name]), {})


def symptoms(ctx: Context, missing: list[str]) -> Iterator[tuple[int, Symptom]]:
    """Every symptom in the order DeepDiagnosis checks them, epoch by epoch."""
    for epoch in range(len(ctx.history)):
        yield from ((epoch, s) for s in forward_checks(ctx, epoch, missing))
        yield from ((epoch, s) for s in unchanged_forward(ctx, epoch, missing))
        yield from ((epoch, s) for s in metric_checks(ctx, epoch))
        yield from ((epoch, s) for s in gradient_checks(ctx, epoch, missing))
        yield from ((epoch, s) for s in unchanged_checks(ctx, epoch, missing))


def context(run: Run) -> Context:
    """Read the run once: history, first batch, layers and the inputs' range."""
    batch = first_batch(run.probe, run.config.batch_size) if run.probe is not None else None
    if run.probe is not None:
        X, _ = run.probe.train_data()
        outside = bool(X.numel()) and float(X.abs().max()) > INPUT_BOUND
    else:
        outside = run.trace.input_stats.get("abs_max", 0.0) > INPUT_BOUND
    model_leaves = leaves(batch.model) if batch is not None else []
    layers = weighted_layers(batch.model) if batch is not None else []
    stored = {id(p): n for n, p in batch.model.named_parameters()} if batch is not None else {}
    weight_of = {n: stored[id(m.weight)] for n, m in layers if id(m.weight) in stored}
    weighted = [n for n, _ in layers]
    return Context(run, epochs(run.trace), batch, model_leaves, weighted, outside, weight_of)


@DIAGNOSERS.register("deepdiagnosis")
class DeepDiagnosis:
    """DeepDiagnosis's symptoms and fixes (ICSE 2022), published defaults."""

    name = "deepdiagnosis"
    probes = True  # the first batch's outputs, gradients and weights; the model's layers
    tuned_on: frozenset[str] | set[str] = frozenset()

    def diagnose(self, run: Run) -> Diagnosis:
        """The first symptom, labelled by its fix when the fix names a fault."""
        ctx = context(run)
        missing: list[str] = [] if run.probe is not None else ["probe"]
        for epoch, found in symptoms(ctx, missing):
            fix_label = FIXES[found.fix]
            table = {found.fix: fix_label} if fix_label is not None else SYMPTOMS
            return answer(
                table,
                found.fix if fix_label is not None else found.name,
                rule=found.name,
                fired=[found.name, f"fix: {found.fix}"],
                evidence={
                    "epoch": epoch,
                    "layer": found.where,
                    "deepdiagnosis_symptom": found.name,
                    "fix": found.fix,
                    "numbers": found.numbers,
                    "lr_ratios": lr_ratios(ctx),
                },
                missing=missing,
            )
        return answer(
            SYMPTOMS, NO_SYMPTOM, rule="no symptom", fired=[], evidence={}, missing=missing
        )
