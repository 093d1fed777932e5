"""``autotrainer``: the AUTOTRAINER monitor, ported with its published defaults.

Zhang, Zhai, Chen, Wang, Sun and Cai, "AUTOTRAINER: An Automatic DNN Training Problem
Detection and Repair System", ICSE 2021; repository ``shiningrain/AUTOTRAINER``
(``AutoTrainer/utils/monitor.py``: the features and ``judge_issue``; ``utils/utils.py``:
``default_param`` and the callback that calls the monitor). The newer monitor of that
repository is ported (it adds the layer-output checks); the code is written anew.

**How the monitor runs.** A Keras callback calls it at the end of every third epoch
(``check_interval`` 3, epochs counted from 0, so epochs 0, 3, 6, 9 of faultbench's ten),
with the training history so far and the gradients of the first batch. Flags are
sticky. The issue judge runs at a check only when the layer outputs are computed there:
once at the first check past half of the epochs, and at every check after a loss flag
or the slow-convergence flag was raised. The first check whose judge names a problem
stops training; of several problems the highest priority wins (abnormal data 4,
activation and loss issues 3, vanishing, exploding and dying ReLU 2, not converging and
unstable 1; ties go to the one raised first). No problem at any check: healthy.

**Rules, their thresholds and how each was read** (``default_param``):

* ``nan_loss``: a NaN or infinite training or validation loss, or one of at least 1e3
  (``check_large_loss``; the older monitor used 1e5 on the last validation loss).
* ``abnormal_loss``: a negative loss (``check_abnormal_value``).
* ``unstable_loss``: training accuracy oscillates: pairing the i-th local peak with the
  i-th local trough, at least η = 0.2 × epochs pairs differ by ζ = 0.03 or more
  (``ol_judge``).
* ``not_converge``: best validation and best training accuracy both below Θ = 0.7
  (0.6 in the repository's demo). Sticky like every flag: a first epoch below Θ leaves
  it raised for the rest of the run.
* ``slow_convergence``: the largest epoch-to-epoch gain is below δ = 0.01 on both
  training and validation accuracy (``sc_accuracy``). As published, a history of one
  epoch has no gain, so the flag is raised at the first check and stays raised.
* The convergence features are judged once the history holds at least
  0.3 × epochs − 3 epochs (``judgment_point``; always, with ten epochs).
* ``vanishing_gradient``: ‖∇W_first‖/‖∇W_last‖ < β1 = 1e-3 and ‖∇W_first‖ < β2 = 1e-4,
  over the weight matrices and kernels (parameters with two or more dimensions, as
  Keras's kernels; embeddings left out, as Keras hands them as sparse slices).
* ``exploding_gradient``: that ratio > β3 = 70.
* ``dying_relu``: at least γ = 0.7 of all gradient entries are exactly zero.
* ``nan_gradient`` / ``nan_weight``: a NaN or infinite gradient; a non-finite weight.
* ``abnormal_output``: a layer other than the last has mean |output| ≥ ω1 = 10.
* ``output_activation``: the output-sum check, ω2 = 1. Keras's cross-entropy takes
  probabilities, so AUTOTRAINER flags an output row whose |values| sum to more than
  ω2 + 0.1 (no softmax on the output). PyTorch's ``cross_entropy`` takes logits, so the
  same check of "the output does not match the loss" fires when every row's |values|
  sum to at most ω2 + 0.1: the model already outputs probabilities. A NaN sum fires too.
  (AUTOTRAINER's static check of the output activation's name against the loss's name
  flags the same models; the loss's name is not observable here.)

**Signals.** Gradients and layer outputs are those of the first ``batch_size`` training
examples through the run's probe, which offers the model as initialized: every check
reads the same internals, computed before any update (AUTOTRAINER recomputes them on the
current model at each check). Weights are checked at the end of the run
(``weight_change`` not finite). The history's "epoch" is faultbench's evaluation
interval (see :mod:`~faultbench.diagnosers._published`). Without a probe the gradient and
output rules are skipped and listed under ``missing``.

Not ported: the overfitting features (``test_not_well``, ``test_turn_bad``) and
``large_weight``, which the published judge computes but never reads; the improper-loss
check, which compares the Keras loss's name with the output width (faultbench's loss is
cross-entropy over C ≥ 2 classes, which passes it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from faultbench.diagnosers._published import (
    HEALTHY,
    NO_SYMPTOM,
    OTHER_FAULT,
    Epochs,
    Finding,
    answer,
    epochs,
    first_batch,
)
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Run

#: AUTOTRAINER's ``default_param`` (utils/utils.py).
PARAMS = {
    "beta_1": 1e-3,  # vanishing: gradient-norm ratio first/last layer below this
    "beta_2": 1e-4,  # vanishing: and the first layer's gradient norm below this
    "beta_3": 70.0,  # exploding: gradient-norm ratio above this
    "gamma": 0.7,  # dying ReLU: share of exactly-zero gradients at least this
    "zeta": 0.03,  # unstable: peak-minus-trough accuracy at least this
    "eta": 0.2,  # unstable: in at least this share of the epochs
    "delta": 0.01,  # slow convergence: largest accuracy gain below this
    "Theta": 0.7,  # not converging: best accuracy below this
    "omega_1": 10.0,  # abnormal output: mean |layer output| at least this
    "omega_2": 1.0,  # output activation: row sums compared with this + 0.1
}
CHECK_EVERY = 3  # epochs between checks (the repository's check_interval default)
LARGE_LOSS = 1e3  # check_large_loss's threshold in the newer monitor
MID_CHECK = 0.5  # the layer outputs are computed once past this share of the epochs
JUDGMENT_POINT = 0.3  # convergence is judged from this share of the epochs, less one gap

#: AUTOTRAINER's problem -> faultbench's label (see docs/ports.md).
SYMPTOMS: dict[str, str] = {
    "abnormal_data": "huge_inputs",  # repair: normalize the data
    "activation_issue": "softmax_before_loss",  # repair: change the output activation
    "loss_issue": "softmax_before_loss",  # repair: change the loss (output and loss disagree)
    "explode": "lr_too_high",  # exploding gradients, NaN loss: the rate of the nine
    "relu": "dead_units",  # dying ReLU
    "vanish": OTHER_FAULT,  # vanishing gradients: none of the nine
    "unstable": "lr_too_high",  # oscillating accuracy; first repairs: optimizer, rate
    "not_converge": OTHER_FAULT,  # names no fault (repairs: optimizer, rate, init)
    NO_SYMPTOM: HEALTHY,
}
PRIORITY = {  # modules.problem_evaluation: the higher one is reported
    "abnormal_data": 4,
    "activation_issue": 3,
    "loss_issue": 3,
    "vanish": 2,
    "explode": 2,
    "relu": 2,
    "not_converge": 1,
    "unstable": 1,
}


#: Every rule the port can name in ``evidence["fired"]``: the features, then the problems.
RULES: tuple[str, ...] = (
    "nan_loss",
    "abnormal_loss",
    "unstable_loss",
    "not_converge",
    "slow_convergence",
    "vanishing_gradient",
    "exploding_gradient",
    "dying_relu",
    "nan_gradient",
    "nan_weight",
    "output_activation",
    "abnormal_output",
    *(f"problem: {p}" for p in PRIORITY),  # not_converge names a feature and a problem
)


@dataclass(frozen=True)
class Internals:
    """What the monitor reads off the model: first-batch gradients and layer outputs."""

    kernel_norms: tuple[float, ...]  # ‖∇W‖ of each weight matrix or kernel, input side first
    zero_share: float  # share of exactly-zero entries over every parameter's gradient
    grads_finite: bool  # no NaN or infinite gradient entry
    max_row_sum: float  # largest sum of |output| over the batch's rows (nan if any is nan)
    layer_mean_abs: dict[str, float]  # mean |output| of every leaf module but the last


# -- the rules: history ---------------------------------------------------------------


def nan_loss(h: Epochs) -> Finding:
    """A NaN, infinite or very large (>= 1e3) training or validation loss."""
    losses = np.concatenate([h.loss, h.val_loss])
    largest = _best(losses)
    bad = bool(np.any(~np.isfinite(losses))) or largest >= LARGE_LOSS
    return Finding(bad, {"max_loss": largest})


def abnormal_loss(h: Epochs) -> Finding:
    """A negative training or validation loss."""
    lowest = float(np.nanmin(np.concatenate([h.loss, h.val_loss]), initial=math.inf))
    return Finding(lowest < 0, {"min_loss": lowest})


def _peaks_and_troughs(acc: np.ndarray) -> tuple[list[float], list[float]]:
    peaks, troughs = [], []
    for i in range(1, len(acc) - 1):
        if acc[i] - acc[i - 1] >= 0 and acc[i] - acc[i + 1] >= 0:
            peaks.append(float(acc[i]))
        if acc[i] - acc[i - 1] <= 0 and acc[i] - acc[i + 1] <= 0:
            troughs.append(float(acc[i]))
    return peaks, troughs


def unstable_loss(h: Epochs) -> Finding:
    """Training accuracy swings by zeta or more in at least eta of the epochs (ol_judge)."""
    peaks, troughs = _peaks_and_troughs(h.acc)
    swings = sum(p - t >= PARAMS["zeta"] for p, t in zip(peaks, troughs))
    return Finding(swings >= PARAMS["eta"] * len(h.acc), {"swings": swings, "epochs": len(h.acc)})


def not_converge(h: Epochs) -> Finding:
    """Best validation and best training accuracy both below Theta."""
    best_val, best_train = _best(h.val_acc), _best(h.acc)
    low = best_val < PARAMS["Theta"] and best_train < PARAMS["Theta"]
    return Finding(low, {"best_val_acc": best_val, "best_train_acc": best_train})


def _largest_gain(acc: np.ndarray) -> float:
    gains = np.diff(acc)
    return float(max(0.0, np.nanmax(gains, initial=0.0)))


def slow_convergence(h: Epochs) -> Finding:
    """The largest epoch-to-epoch accuracy gain below delta, on validation and training."""
    val, train = _largest_gain(h.val_acc), _largest_gain(h.acc)
    slow = val < PARAMS["delta"] and train < PARAMS["delta"]
    return Finding(slow, {"largest_val_gain": val, "largest_train_gain": train})


def _best(values: np.ndarray) -> float:
    return float(np.nanmax(values, initial=-math.inf))


# -- the rules: model internals -------------------------------------------------------


def _norm_ratio(x: Internals) -> float:
    first, last = x.kernel_norms[0], x.kernel_norms[-1]
    return first / last if last > 0 else math.inf if first > 0 else math.nan


def vanishing_gradient(x: Internals) -> Finding:
    """First/last kernel gradient norm below beta_1, and the first below beta_2."""
    ratio = _norm_ratio(x)
    fired = ratio < PARAMS["beta_1"] and x.kernel_norms[0] < PARAMS["beta_2"]
    return Finding(fired, {"norm_ratio": ratio, "first_norm": x.kernel_norms[0]})


def exploding_gradient(x: Internals) -> Finding:
    """First/last kernel gradient norm above beta_3."""
    ratio = _norm_ratio(x)
    return Finding(ratio > PARAMS["beta_3"], {"norm_ratio": ratio})


def dying_relu(x: Internals) -> Finding:
    """At least gamma of all gradient entries are exactly zero."""
    return Finding(x.zero_share >= PARAMS["gamma"], {"zero_share": x.zero_share})


def nan_gradient(x: Internals) -> Finding:
    """A NaN or infinite gradient entry."""
    return Finding(not x.grads_finite, {})


def nan_weight(run: Run) -> Finding:
    """A weight that ended NaN or infinite (its layer's weight change is not finite)."""
    bad = sorted(k for k, v in run.trace.weight_change.items() if not math.isfinite(v))
    return Finding(bool(bad), {"nonfinite_layers": bad})


def output_activation(x: Internals) -> Finding:
    """Every output row sums (in |.|) to at most omega_2 + 0.1: probabilities into a logits loss."""
    limit = PARAMS["omega_2"] + 0.1
    fired = not math.isfinite(x.max_row_sum) or x.max_row_sum <= limit
    return Finding(fired, {"max_row_sum": x.max_row_sum, "limit": limit})


def abnormal_output(x: Internals) -> Finding:
    """A layer (not the last) whose mean |output| is at least omega_1."""
    big = {k: v for k, v in x.layer_mean_abs.items() if not v < PARAMS["omega_1"]}
    return Finding(bool(big), {"layers": big})


# -- the monitor ----------------------------------------------------------------------


def internals(run: Run) -> Internals | None:
    """The first batch's gradients and layer outputs through the probe (None without one)."""
    if run.probe is None:
        return None
    batch = first_batch(run.probe, run.config.batch_size)
    embeddings = {f"{n}.weight" for n, m in batch.model.named_modules() if _is_embedding(m)}
    grads = {k: g for k, g in batch.grads.items() if k not in embeddings}
    kernels = [float(np.linalg.norm(g)) for g in grads.values() if g.ndim > 1]
    entries = np.concatenate([g.ravel() for g in grads.values()]) if grads else np.zeros(1)
    rows = np.abs(batch.output).reshape(len(batch.output), -1).sum(axis=1)
    names = list(batch.outputs)
    return Internals(
        kernel_norms=tuple(kernels) or (math.nan,),
        zero_share=float(np.mean(entries == 0)),
        grads_finite=bool(np.all(np.isfinite(entries))),
        max_row_sum=float(rows.max()) if len(rows) and np.all(np.isfinite(rows)) else math.nan,
        layer_mean_abs={k: float(np.mean(np.abs(batch.outputs[k]))) for k in names[:-1]},
    )


def _is_embedding(module: Any) -> bool:
    return type(module).__name__ == "Embedding"


HISTORY_RULES: tuple[Callable[[Epochs], Finding], ...] = (
    unstable_loss,
    not_converge,
    slow_convergence,
)
GRADIENT_RULES: tuple[Callable[[Internals], Finding], ...] = (
    vanishing_gradient,
    exploding_gradient,
    dying_relu,
)


class _Monitor:
    """The sticky flags of one run, updated check by check (``IssueMonitor``)."""

    def __init__(self, run: Run, x: Internals | None, total: int) -> None:
        self.run, self.x, self.total = run, x, total
        self.flags: dict[str, bool] = {}
        self.evidence: dict[str, Any] = {}
        self.fired: list[str] = []

    def _set(self, name: str, finding: Finding) -> None:
        self.evidence[name] = finding.evidence
        if finding.fired:
            self.flags[name] = True
            self.fired.append(name)

    def update(self, history: Epochs, with_outputs: bool) -> None:
        """``determine``: layer, gradient, weight and loss features, in that order."""
        if self.x is not None:
            if with_outputs:
                self._set("output_activation", output_activation(self.x))
                if not self.flags.get("output_activation"):
                    self._set("abnormal_output", abnormal_output(self.x))
            self._set("nan_gradient", nan_gradient(self.x))
            if not self.flags.get("nan_gradient"):
                for rule in GRADIENT_RULES:
                    self._set(rule.__name__, rule(self.x))
        self._set("nan_weight", nan_weight(self.run))
        self._set("nan_loss", nan_loss(history))
        if self.flags.get("nan_loss"):  # loss_issue returns early on a NaN loss
            return
        self._set("abnormal_loss", abnormal_loss(history))
        judged = len(history) >= JUDGMENT_POINT * self.total - CHECK_EVERY
        for history_rule in HISTORY_RULES if judged else ():
            self._set(history_rule.__name__, history_rule(history))

    def judge(self) -> list[str]:
        """``judge_issue``: the problems the flags name, in the order they are raised."""
        f = self.flags.get
        issues = ["abnormal_data"] if f("abnormal_output") else []
        if f("nan_loss") or f("abnormal_loss"):
            if f("abnormal_loss"):
                issues.append("loss_issue")
            elif f("output_activation"):
                issues.append("activation_issue")
            elif f("nan_weight") or f("nan_gradient"):
                issues.append("explode")
        if f("not_converge") or f("slow_convergence"):
            for flag, issue in (
                ("output_activation", "activation_issue"),
                ("dying_relu", "relu"),
                ("exploding_gradient", "explode"),
                ("vanishing_gradient", "vanish"),
            ):
                if f(flag):
                    issues.append(issue)
                    break
            else:
                if f("not_converge") and f("slow_convergence") and not f("abnormal_output"):
                    issues.append("not_converge")
        if f("unstable_loss"):
            issues.append("activation_issue" if f("output_activation") else "unstable")
        return issues


@DIAGNOSERS.register("autotrainer")
class AutoTrainer:
    """AUTOTRAINER's problem detection (ICSE 2021), published defaults."""

    name = "autotrainer"
    probes = True  # first-batch gradients and layer outputs of the initialized model
    tuned_on: frozenset[str] | set[str] = frozenset()

    def diagnose(self, run: Run) -> Diagnosis:
        """Run the checks epoch by epoch; the first problem found is the answer."""
        history = epochs(run.trace)
        total = len(history)
        monitor = _Monitor(run, internals(run), total)
        missing = ["probe"] if monitor.x is None else []
        mid_check = True
        for epoch in range(0, total, CHECK_EVERY):
            f = monitor.flags.get
            mid = mid_check and epoch >= MID_CHECK * total
            with_outputs = bool(f("abnormal_loss") or f("nan_loss") or f("slow_convergence") or mid)
            mid_check = mid_check and not mid
            monitor.update(history.upto(epoch), with_outputs)
            issues = monitor.judge() if with_outputs else []
            if issues:
                top = max(issues, key=lambda i: PRIORITY[i])  # first of the highest
                return answer(
                    SYMPTOMS,
                    top,
                    rule=top,
                    fired=[*monitor.fired, *(f"problem: {i}" for i in issues)],
                    evidence={"epoch": epoch, "issues": issues, "features": monitor.evidence},
                    missing=missing,
                )
        return answer(
            SYMPTOMS,
            NO_SYMPTOM,
            rule="no problem found",
            fired=monitor.fired,
            evidence={"features": monitor.evidence},
            missing=missing,
        )
