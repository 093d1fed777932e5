"""``thedeepchecker``: TheDeepChecker's checks, ported with its published settings.

Ben Braiek and Khomh, "Testing Feedforward Neural Networks Training Programs", ACM TOSEM
2023 (TheDeepChecker); repository ``thedeepchecker/thedeepchecker``
(``deep_checker/checkers.py``, ``hooks.py``, ``metrics.py``, ``config/settings.yaml``).
Written anew; the checks are in :mod:`~faultbench.diagnosers._deepchecker`, with each
setting's name in ``settings.yaml`` beside its value.

**How it runs.** TheDeepChecker tests a training program in three phases, each on a
fresh copy of the model as initialized (the run's probe) and with the program's own
optimizer (rebuilt from the run's configuration: its class and learning rate). With its
default ``fail_on: false`` it logs every warning and goes on; the port answers with the
label of the first warning logged, the one a user fixes first (with ``fail_on: true`` the
tool stops there). That answer is the same under either setting, so the port stops at
its first warning, as ``fail_on: true`` does: the checks run in the order they log, and
no later check can log before it (:func:`logged` still runs every phase, for the whole
log). No warning: healthy, after every phase. Every phase trains through
``probe.loss``, so its cost is counted (at most about 1,200 steps plus the post-check's
epochs, which stop early once the loss falls fast enough).

1. **Pre-checks** on the training data and the untrained model:
   ``features_constant`` / ``features_unnormalized`` (homogeneous features, the default of
   its array loader: normalized when max ≈ 1 and min ≈ 0 or −1, or mean ≈ 0 and std ≈ 1,
   tolerance 1e-2); ``unbalanced_labels`` (normalized label perplexity < 0.5);
   ``poor_init`` and ``need_he`` / ``need_glorot`` / ``need_lecun`` / ``need_init_well``
   (each weight's std against He, Glorot, LeCun by an F-test at α = 0.1, by the model's
   activation); ``need_bias`` / ``last_bias`` / ``ineff_bias_cls`` / ``zero_bias``;
   ``poor_reduction_loss`` (a batch of 128 repeated 2, 4, 8 times doubles the loss) and
   ``poor_init_loss`` (|loss − ln C| ≥ 1.0 × ln C); then the single-batch fit: 16
   examples (``int(16 / C)`` per class, as its sampler draws), 1000 iterations:
   ``nan_loss`` / ``inf_loss``, ``underfitting_single_batch`` (best accuracy below 0.95),
   ``zero_loss`` (loss ≤ 1e-8, or ≤ 1e-5 and smoothness > 0.95).
2. **Overfit phase**: 50 examples, 200 iterations; from iteration 10, every 10 (its
   hooks' order: weights, biases, activations, gradients, loss): non-finite weights,
   biases, activations, outputs, gradients or loss; ``w_sign`` (> 95% negative),
   ``w_dead`` (> 95% below 1e-5), ``w_div_*`` / ``b_div_*`` (mean |·| > 1e8 or growing
   ≥ 2× per iteration over a window of 5); ``act_dead`` (> 50% of neurons with
   95th-percentile |activation| < 1e-5 over the last 10 batches), ``act_sat`` (sigmoid
   and tanh models), ``act_unstable`` (std outside [0.5, 2] beyond an F-test);
   ``out_cons``, ``output_invalid``; ``w_untrained`` / ``w_fast`` / ``w_slow`` (mean
   log10 update ratio = 0, > −1, < −4); ``gw_van_*`` (mean |g| < 1e-6 or halving over
   the window), ``gw_exp_*`` (> 1e6 or doubling); over the means of 10 iterations:
   ``stagnated_loss`` (< 5% drop per period for 5), ``div_loss`` (≥ 2× its minimum,
   growing), ``fluctuated_loss`` (smoothness < 0.5), ``non_representative_loss``
   (|corr(loss, accuracy)| < 0.5).
3. **Post-check**: ``corrupted_data``: a fresh model trained on all the training data
   in batches of 32 for up to 50 epochs; the first batch's loss of each epoch barely
   varies (variance ≈ 0) after 5 warm-up epochs. It stops early, without warning, once
   the loss improves by 10% or more per epoch for long enough (patience 5).

**How the TensorFlow rules were read for PyTorch.** "Weights" and "biases" are those of
the Linear and convolution layers (TheDeepChecker checks the tensors its user registers;
recurrent and embedding matrices are left out), with fan-in and fan-out from PyTorch's
(out, in, kernel...) layout. "Activations" are the outputs of the activation modules but
a final softmax; a convolution's are taken per channel. The "post-activation outputs"
are ``softmax(output)``: the probabilities that PyTorch's ``cross_entropy`` forms from the
logits it is given (TheDeepChecker's user hands it the probability tensor), so the
output-validity check passes even on a model that ends in its own softmax. The model's
``act_fn_name`` is relu when it has a ReLU-family module, else tanh or sigmoid.

Not ported, each for its reason: the numerical gradient check and the instance-wise
operation check (disabled by default, and for operations a user names); the
data-dependency test after a failed single-batch fit (its published condition can only
hold after the loop has returned); the regularization checks (faultbench's loss has no
regularization term); the train/eval consistency and augmentation post-checks (they need
validation data, which the probe does not offer, and apply to models with dropout or
normalization and to augmented data, which faultbench's runs do not have). Without a
probe, or with an optimizer torch does not know, the port abstains (``missing``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.diagnosers import _deepchecker as dc
from faultbench.diagnosers._published import (
    HEALTHY,
    NO_SYMPTOM,
    OTHER_FAULT,
    activation_kind,
    answer,
    forward_with_outputs,
    is_activation,
    is_softmax,
    leaves,
    make_optimizer,
    one_thread,
    weighted_layers,
)
from faultbench.scoring.diagnosis import DIAGNOSERS, UNKNOWN, Diagnosis
from faultbench.scoring.run import Probe, Run, accuracy
from faultbench.training.monitor import IGNORE_INDEX

SEED = 42  # DeepChecker.setup's default seeds (numpy sampling, torch)

#: TheDeepChecker's message key -> faultbench's label (see docs/ports.md).
SYMPTOMS: dict[str, str] = {
    "features_constant": OTHER_FAULT,
    "features_unnormalized": "huge_inputs",
    "unbalanced_labels": OTHER_FAULT,
    "poor_init": OTHER_FAULT,
    "need_he": OTHER_FAULT,
    "need_glorot": OTHER_FAULT,
    "need_lecun": OTHER_FAULT,
    "need_init_well": OTHER_FAULT,
    "need_bias": OTHER_FAULT,
    "last_bias": OTHER_FAULT,
    "ineff_bias_cls": OTHER_FAULT,
    "zero_bias": OTHER_FAULT,
    "poor_reduction_loss": OTHER_FAULT,
    "poor_init_loss": OTHER_FAULT,
    "nan_loss": "lr_too_high",
    "inf_loss": "lr_too_high",
    "underfitting_single_batch": OTHER_FAULT,
    "zero_loss": OTHER_FAULT,
    "w_nan": "lr_too_high",
    "w_inf": "lr_too_high",
    "b_nan": "lr_too_high",
    "b_inf": "lr_too_high",
    "act_nan": "lr_too_high",
    "act_inf": "lr_too_high",
    "out_nan": "lr_too_high",
    "out_inf": "lr_too_high",
    "gw_nan": "lr_too_high",
    "gw_inf": "lr_too_high",
    "w_sign": OTHER_FAULT,
    "w_dead": OTHER_FAULT,
    "w_div_1": "lr_too_high",
    "w_div_2": "lr_too_high",
    "b_div_1": "lr_too_high",
    "b_div_2": "lr_too_high",
    "act_dead": "dead_units",
    "act_sat": OTHER_FAULT,
    "act_unstable": OTHER_FAULT,
    "out_cons": OTHER_FAULT,
    "output_invalid": "softmax_before_loss",
    "w_untrained": "frozen_layer",
    "w_fast": "lr_too_high",
    "w_slow": OTHER_FAULT,
    "gw_van_1": OTHER_FAULT,
    "gw_van_2": OTHER_FAULT,
    "gw_exp_1": "lr_too_high",
    "gw_exp_2": "lr_too_high",
    "stagnated_loss": OTHER_FAULT,
    "div_loss": "lr_too_high",
    "fluctuated_loss": "lr_too_high",
    "non_representative_loss": OTHER_FAULT,
    "corrupted_data": "label_mismatch",
    NO_SYMPTOM: HEALTHY,
}


#: Every rule the port can name in ``evidence["fired"]``.
RULES: tuple[str, ...] = tuple(s for s in SYMPTOMS if s != NO_SYMPTOM)


@dataclass(frozen=True)
class Logged:
    """One warning as TheDeepChecker logs it."""

    phase: str  # "pre", "overfit" or "post"
    key: str  # its message key (a key of SYMPTOMS)
    numbers: dict[str, object]  # what it compared
    iteration: int | None = None  # the overfit iteration, where there is one


class _Programme:
    """The pieces every phase needs: probe, data, sampler, the run's optimizer."""

    def __init__(self, run: Run, probe: Probe) -> None:
        self.run, self.probe = run, probe
        self.X, self.y = probe.train_data()
        self.n_classes = max(2, int(run.config.n_classes))
        self.rng = np.random.RandomState(SEED)

    def sample(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``InputData.get_sample``: ``int(size / C)`` examples of each class, with repeats."""
        if self.y.dim() > 1:  # a sequence model's rows have no one class: rows, with repeats
            rows = torch.from_numpy(self.rng.choice(len(self.y), size))
            return self.X[rows], self.y[rows]
        per_class = int(size / self.n_classes)
        labels = self.y.numpy()
        picks = [
            self.rng.choice(np.flatnonzero(labels == c), per_class)
            for c in range(self.n_classes)
            if per_class and np.any(labels == c)
        ]
        index = (
            torch.from_numpy(np.concatenate(picks)) if picks else torch.zeros(0, dtype=torch.long)
        )
        return self.X[index], self.y[index]

    def fresh(self) -> tuple[nn.Module, torch.optim.Optimizer | None]:
        """The model as initialized and the run's optimizer over all its parameters."""
        torch.manual_seed(SEED)
        model = self.probe.make_model()
        model.train()
        return model, make_optimizer(self.run, list(model.parameters()))

    def step(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, X: torch.Tensor, y: torch.Tensor
    ) -> tuple[float, float, torch.Tensor, dict[str, torch.Tensor]]:
        """One training iteration: (loss, accuracy, output, leaf outputs) before the update."""
        out, outputs = forward_with_outputs(model, X)
        loss = self.probe.loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        acc = accuracy(out, y) if len(y) else math.nan
        return float(loss.detach()), acc, out.detach(), {k: v.detach() for k, v in outputs.items()}


def _tensors(model: nn.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    weights = {f"{n}.weight": m.weight for n, m in weighted_layers(model)}
    biases = {f"{n}.bias": m.bias for n, m in weighted_layers(model) if m.bias is not None}
    return weights, biases


def _numpy(tensors: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.detach().double().numpy() for k, v in tensors.items()}


# -- 1. pre-checks ----------------------------------------------------------------------


def pre_checks(p: _Programme) -> Iterator[Logged]:
    """The data, the initial weights and biases, the initial loss, the single-batch fit."""
    model, optimizer = p.fresh()
    weights, biases = _tensors(model)
    y = p.y.numpy()
    if y.ndim > 1:  # a sequence model's targets: the tokens its loss counts, as classes
        y = y[y != IGNORE_INDEX]
    alerts = [
        *dc.check_features(p.X.double().numpy()),
        *dc.check_targets(y, p.n_classes),
        *dc.check_initial_weights(_numpy(weights), activation_kind(model)),
        *dc.check_initial_biases(_numpy(biases), y, p.n_classes),
        *_initial_loss(p, model),
    ]
    yield from (Logged("pre", key, numbers) for key, numbers in alerts)
    if optimizer is not None:
        yield from (Logged("pre", k, n) for k, n in dc.check_single_batch(*_fit_single_batch(p)))


def _initial_loss(p: _Programme, model: nn.Module) -> list[dc.Alert]:
    X, y = p.sample(dc.INIT_LOSS_SAMPLE)
    losses = []
    n = dc.SIZE_GROWTH_RATE
    with torch.no_grad():
        while n <= dc.SIZE_GROWTH_RATE * dc.SIZE_GROWTH_ITERS:
            losses.append(
                float(
                    p.probe.loss(
                        model(X.repeat(n, *[1] * (X.dim() - 1))), y.repeat(n, *[1] * (y.dim() - 1))
                    )
                )
            )
            n *= dc.SIZE_GROWTH_RATE
        initial = float(p.probe.loss(model(X), y))
    return [*dc.check_loss_reduction(losses), *dc.check_initial_loss(initial, p.n_classes)]


def _fit_single_batch(p: _Programme) -> tuple[np.ndarray, np.ndarray]:
    X, y = p.sample(dc.SINGLE_BATCH)
    model, optimizer = p.fresh()
    assert optimizer is not None
    losses, accs = [], []
    for _ in range(dc.SINGLE_BATCH_ITERS):
        loss, acc, _, _ = p.step(model, optimizer, X, y)
        losses.append(loss)
        accs.append(acc)
        if not math.isfinite(loss):
            break
    return np.array(losses), np.array(accs)


# -- 2. the overfit phase ---------------------------------------------------------------


class _Overfit:
    """The overfit phase's hooks: what each remembers between iterations."""

    def __init__(self, model: nn.Module, n_classes: int) -> None:
        self.weights, self.biases = _tensors(model)
        model_leaves = leaves(model)
        final = model_leaves[-1] if model_leaves else None
        self.acts = [
            n
            for n, m in model_leaves
            if is_activation(m) and not (final is not None and n == final[0] and is_softmax(n, m))
        ]
        self.kind = activation_kind(model)
        self.n_classes = n_classes
        keep = dc.BUFFER_SCALE
        self.w_means = {k: deque[float](maxlen=keep) for k in self.weights}
        self.b_means = {k: deque[float](maxlen=keep) for k in self.biases}
        self.g_means = {k: deque[float](maxlen=keep) for k in self.weights}
        self.act_buffers: dict[str, deque[np.ndarray]] = {k: deque(maxlen=keep) for k in self.acts}
        self.magnitudes: dict[str, list[float]] = {k: [] for k in self.weights}
        self.outputs = dc.OutputState(np.zeros(n_classes, dtype=bool))
        self.loss = dc.LossState()
        self.step_losses: list[float] = []
        self.step_perfs: list[float] = []

    def after(
        self,
        i: int,
        before: dict[str, np.ndarray],
        grads: dict[str, np.ndarray],
        probs: np.ndarray,
        outputs: dict[str, np.ndarray],
        loss: float,
        acc: float,
    ) -> list[dc.Alert]:
        """Every hook's ``after_run`` for iteration ``i``, in the published order."""
        checking = i >= dc.START and i % dc.PERIOD == 0
        alerts: list[dc.Alert] = []
        for name, tensor in self.weights.items():
            w = tensor.detach().double().numpy()
            if found := dc.numerical("w", w, name):
                alerts += found
                continue
            self.w_means[name].append(float(np.mean(np.abs(w))))
            if checking:
                alerts += dc.check_weight(w, self.w_means[name], name)
        for name, tensor in self.biases.items():
            b = tensor.detach().double().numpy()
            if found := dc.numerical("b", b, name):
                alerts += found
                continue
            self.b_means[name].append(float(np.mean(np.abs(b))))
            if checking:
                alerts += dc.check_divergence("b", self.b_means[name], name)
        alerts += self._activations(i, checking, probs, outputs)
        alerts += self._gradients(i, checking, before, grads)
        return alerts + self._loss(i, loss, acc)

    def _activations(
        self, i: int, checking: bool, probs: np.ndarray, outputs: dict[str, np.ndarray]
    ) -> list[dc.Alert]:
        alerts: list[dc.Alert] = []
        if len(probs) > 1:
            self.outputs.varied |= np.var(probs, axis=0) > 0
        if i % dc.PERIOD == 0:
            alerts += dc.check_outputs(probs, self.outputs, self.n_classes)
        for name in self.acts:
            acts = outputs[name]
            self.act_buffers[name].append(acts)
            if not checking:
                continue
            if found := dc.numerical("act", acts, name):
                alerts += found
                continue
            buffer = np.concatenate(list(self.act_buffers[name]))
            if self.kind in ("sigmoid", "tanh"):
                alerts += dc.check_saturated_neurons(buffer, name)
            else:
                alerts += dc.check_dead_neurons(buffer, name)
            alerts += dc.check_activation_spread(buffer, name)
        return alerts

    def _gradients(
        self, i: int, checking: bool, before: dict[str, np.ndarray], grads: dict[str, np.ndarray]
    ) -> list[dc.Alert]:
        alerts: list[dc.Alert] = []
        for name, tensor in self.weights.items():
            g = grads[name]
            if found := dc.numerical("gw", g, name):
                alerts += found
                continue
            self.g_means[name].append(float(np.mean(np.abs(g))))
            magnitude = dc.update_magnitude(before[name], tensor.detach().double().numpy())
            if magnitude is not None:
                self.magnitudes[name].append(magnitude)
                if i > 0 and i % dc.PERIOD == 0:
                    alerts += dc.check_updates(self.magnitudes[name], name)
                    self.magnitudes[name] = []
            if checking:
                alerts += dc.check_gradient(self.g_means[name], name)
        return alerts

    def _loss(self, i: int, loss: float, acc: float) -> list[dc.Alert]:
        self.step_losses.append(loss)
        self.step_perfs.append(acc)
        if not math.isfinite(loss):
            return [("nan_loss" if math.isnan(loss) else "inf_loss", {"iteration": i})]
        if i % dc.PERIOD:
            return []
        mean = float(np.mean(self.step_losses))
        self.loss.lowest = min(mean, self.loss.lowest)
        self.loss.losses.append(mean)
        self.loss.perfs.append(float(np.mean(self.step_perfs)))
        self.step_losses, self.step_perfs = [], []
        return dc.check_loss_curve(self.loss)


def overfit_phase(p: _Programme) -> Iterator[Logged]:
    """Train on one batch of 50 for 200 iterations, checking as the hooks do."""
    X, y = p.sample(dc.OVERFIT_BATCH)
    model, optimizer = p.fresh()
    assert optimizer is not None
    hooks = _Overfit(model, p.n_classes)
    for i in range(dc.OVERFIT_ITERS):
        before = _numpy(hooks.weights)
        loss, acc, out, outputs = p.step(model, optimizer, X, y)
        grads = {
            k: w.grad.detach().double().numpy() if w.grad is not None else np.zeros(tuple(w.shape))
            for k, w in hooks.weights.items()
        }
        if out.dim() >= 2:  # a sequence model's positions are rows of class scores too
            probs = F.softmax(out.double().reshape(-1, out.shape[-1]), dim=-1).numpy()
        else:
            probs = out.double().numpy()
        found = hooks.after(i, before, grads, probs, _numpy(outputs), loss, acc)
        yield from (Logged("overfit", key, numbers, i) for key, numbers in found)


# -- 3. post-check ----------------------------------------------------------------------


def post_check(p: _Programme) -> Iterator[Logged]:
    """Corrupted labels: train on all the data; does the loss ever vary?"""
    model, optimizer = p.fresh()
    assert optimizer is not None
    n = len(p.y)
    per_epoch = max(1, n // dc.LABELS_BATCH)
    losses: list[float] = []
    patience = dc.LABELS_PATIENCE
    for _ in range(dc.LABELS_EPOCHS):
        order = torch.from_numpy(p.rng.permutation(n))
        for i in range(per_epoch):
            index = order[i * dc.LABELS_BATCH : (i + 1) * dc.LABELS_BATCH]
            loss, _, _, _ = p.step(model, optimizer, p.X[index], p.y[index])
            if i:
                continue
            if loss == 0.0:
                return
            losses.append(loss)
            if len(losses) < 3:
                continue
            improvement = round((losses[-2] - losses[-1]) / losses[-1], 2)
            if improvement >= dc.LABELS_IMPROVEMENT:
                patience -= int(improvement / dc.LABELS_IMPROVEMENT)
                if patience <= 0:
                    return
            else:
                patience = dc.LABELS_PATIENCE
    yield from (Logged("post", k, n) for k, n in dc.check_corrupted_labels(losses))


def knows_optimizer(run: Run) -> bool:
    """Whether torch has the run's optimizer class (the phases that train need it)."""
    return make_optimizer(run, [nn.Parameter(torch.zeros(1))]) is not None


def warnings_of(run: Run, probe: Probe) -> Generator[Logged, None, None]:
    """The warnings of the three phases, in the order TheDeepChecker logs them, each
    phase run only as far as the warnings are asked for (the checks are generators)."""
    p = _Programme(run, probe)
    with one_thread():
        yield from pre_checks(p)
        if knows_optimizer(run):
            yield from overfit_phase(p)
            yield from post_check(p)


def logged(run: Run, probe: Probe) -> list[Logged]:
    """Every warning of the three phases: the whole log of ``fail_on: false``."""
    return list(warnings_of(run, probe))


def first_warning(run: Run, probe: Probe) -> Logged | None:
    """The first warning logged, the phases stopped there (``fail_on: true``): what
    TheDeepChecker answers under either setting, at a fraction of the cost."""
    warnings = warnings_of(run, probe)
    try:
        return next(warnings, None)
    finally:
        warnings.close()  # leaves one_thread() now, not when the generator is collected


@DIAGNOSERS.register("thedeepchecker")
class TheDeepChecker:
    """TheDeepChecker's pre-, overfit and post-checks (TOSEM), published settings."""

    name = "thedeepchecker"
    probes = True  # every phase retrains the initialized model through the probe
    tuned_on: frozenset[str] | set[str] = frozenset()
    # Its probe trains (a healthy run that passes the pre-checks goes through all three
    # phases, seconds on a language run): the report scores seed 0.
    subset_seeds = 1
    reads_trace = False  # never reads run.trace: its answer cannot depend on the Monitor's sampling

    def diagnose(self, run: Run) -> Diagnosis:
        """The first warning logged is the answer; the checks stop there."""
        if run.probe is None:
            return Diagnosis(UNKNOWN, evidence={"rule": "abstained", "missing": ["probe"]})
        first = first_warning(run, run.probe)
        missing = [] if knows_optimizer(run) else ["optimizer"]
        if first is None:
            return answer(
                SYMPTOMS, NO_SYMPTOM, rule="no warning", fired=[], evidence={}, missing=missing
            )
        return answer(
            SYMPTOMS,
            first.key,
            rule=first.key,
            fired=[first.key],  # the checks after it did not run
            evidence={"phase": first.phase, "iteration": first.iteration, "numbers": first.numbers},
            missing=missing,
        )
