"""Confirmed by treatment: an alarm stands only if the fix it implies measurably helps.

Given a run's probe (its model as initialized, its loss, its training data), the fix an
alarm implies is tried for a few probe steps and measured against the untreated form:

- ``huge_inputs``: the untrained model's loss on the probe's examples, with the inputs
  standardized (each float feature to mean 0 and unit spread) against as given;
- ``lr_too_high``: a replica of the loop (the run's optimizer, batch size and rate) at a
  tenth of the rate against at the run's rate: the mean loss of its last steps;
- ``missing_zero_grad``: the replica with its gradients cleared every step against the
  run as it went (its recorded losses over the same steps);
- ``frozen_layer``: the replica with every parameter trainable and in the optimizer: do
  the layers that never moved move now?
- ``too_small_model``: every hidden layer narrower than twice the classes widened to that
  (a linear layer's features, a convolution's channels), against as built, on the
  memorization probe and, where that does not settle it, on a replica of the loop; where
  the probe can build it (a layer read, through normalizations and parameter-free
  modules, by a linear layer or convolution of the same ``nn.Sequential``: every model
  of the registry's layers but a transformer's);
- ``softmax_before_loss``: the memorization probe with the model's outputs turned back
  into logits (log-probabilities for classes, log-odds for labels).

A treatment *helps* when the treated number is at most :data:`HELPED` times the untreated
one (a diverged untreated loss against a finite treated one helps too; a memorization
succeeds where the untreated one did not; for frozen layers: every unmoved layer
moves). Every loss goes through ``probe.loss``, so the harness counts what a treatment
costs. A fault without a treatment here (the loader, dead units, labels, the sequence
faults), or a fix the probe cannot build, is raised on its statistic alone, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from faultbench.diagnosers import _features as f
from faultbench.faults.recipe import rows
from faultbench.scoring.memorize import EXAMPLES as MEMORIZED_EXAMPLES
from faultbench.scoring.memorize import MEMORIZED, Memorization, memorize
from faultbench.scoring.run import Probe, Run
from faultbench.training.layers import direct_parameters
from faultbench.training.trace import RunConfig

HELPED = 0.5  # the fix helps: the treated number at most half the untreated one
STEPS = 60  # steps a treated replica of the loop trains (each arm)
LATE = 20  # its last steps whose mean loss is compared
EXAMPLES = 512  # the probe's first examples the replica's batches cycle through
LOWER = 10.0  # a lower rate: the run's over this
WIDER = 2  # a widened layer: this many times the classes it must separate
WIDER_STEPS = 150  # steps each replica of a widening trains: a bottleneck shows late
CONSTANT = 1e-6  # a feature whose spread is below this share of its size is constant
TINY = 1e-12  # the smallest probability a treated output is read at (log of 0)
ROWS_SUM = 1e-4  # a softmax's rows sum to 1 up to float rounding


@dataclass(frozen=True)
class Treatment:
    """What trying an alarm's fix on the probe found."""

    fix: str  # what was tried ("inputs standardized")
    measured: str  # what was compared ("the untrained model's loss")
    before: float  # untreated
    after: float  # treated
    helped: bool  # the fix measurably helped: the alarm stands
    steps: int  # probe steps it cost

    def evidence(self) -> dict[str, Any]:
        """A JSON-ready mapping, with the sentence that says it."""
        return {
            "fix": self.fix,
            "before": _finite(self.before),
            "after": _finite(self.after),
            "helped": self.helped,
            "probe_steps": self.steps,
            "said": self.sentence(),
        }

    def sentence(self) -> str:
        """``"with inputs standardized the untrained model's loss goes from 366 to 2.3"``."""
        verdict = "confirmed" if self.helped else f"not confirmed (needs <= {HELPED:g}x)"
        return (
            f"with {self.fix} {self.measured} goes from {self.before:.3g} to {self.after:.3g}: "
            f"{verdict}"
        )


def _helps(before: float, after: float) -> bool:
    """The treated number at most :data:`HELPED` times the untreated; a diverged untreated
    one (+inf) against a finite treated one helps; nothing helps where the untreated shows
    nothing to fix (-inf, NaN)."""
    if not math.isfinite(after) or math.isnan(before) or before == -math.inf:
        return False
    return before == math.inf or after <= HELPED * before


#: What each treatment is tried on (stored runs' probes: once per process, as memorize).
_DONE: dict[tuple[str, str], Treatment] = {}
REMEMBERED = 4096


def treat(label: str, run: Run, evidence: Mapping[str, Any]) -> Treatment | None:
    """Try the fix the alarm ``label`` implies on ``run``'s probe; None where there is no
    probe or no treatment for the label (the alarm then stands on its statistic).

    ``evidence`` is the finding's (the unmoved layers of a frozen-layer alarm).
    """
    tried = TREATMENTS.get(label)
    if tried is None or run.probe is None:
        return None
    key = (run.probe.key, label)
    if run.probe.key and key in _DONE:
        run.probe.steps_used += _DONE[key].steps
        return _DONE[key]
    before = run.probe.steps_used
    found = tried(run, evidence)
    if found is None:
        return None
    found = replace(found, steps=run.probe.steps_used - before)
    if run.probe.key:
        if len(_DONE) >= REMEMBERED:
            _DONE.clear()
        _DONE[key] = found
    return found


# -- the treatments ---------------------------------------------------------------------


def standardized(run: Run, evidence: Mapping[str, Any]) -> Treatment | None:
    """huge_inputs: the untrained model's loss with the inputs standardized."""
    probe = _probe(run)
    X, y = probe.train_data(min(probe.examples, EXAMPLES))
    if not _floats(X):
        return None  # token ids: nothing to standardize
    model = _fresh(probe)
    with torch.no_grad():
        before = float(probe.loss(probe.forward(model, X), y))
        after = float(probe.loss(probe.forward(model, _standardize(X)), y))
    return Treatment(
        "inputs standardized", "the untrained model's loss", before, after, _helps(before, after), 0
    )


def lower_rate(run: Run, evidence: Mapping[str, Any]) -> Treatment | None:
    """lr_too_high: the replica at a tenth of the run's rate against at its rate."""
    probe = _probe(run)
    fast = _replica(probe, run.config, rate=run.config.lr)
    slow = _replica(probe, run.config, rate=run.config.lr / LOWER)
    if fast is None or slow is None:
        return None
    before, after = _late(fast), _late(slow)
    return Treatment(
        f"the rate lowered {LOWER:g}x (to {run.config.lr / LOWER:.3g})",
        f"the mean loss of a replica's last {LATE} of {STEPS} steps",
        before,
        after,
        _helps(before, after),
        0,
    )


def cleared(run: Run, evidence: Mapping[str, Any]) -> Treatment | None:
    """missing_zero_grad: the replica with its gradients cleared every step: does the
    signature (a gradient whose step noise falls like a sum's) go away?"""
    norms: list[float] = []
    if _replica(_probe(run), run.config, rate=run.config.lr, norms=norms) is None:
        return None
    before = f.accumulation_of(f.total_grad_norm(run))
    after = f.accumulation_of(np.asarray(norms))
    return Treatment(
        "gradients cleared every step",
        f"the fall of the gradient's step noise (the run's, against a {STEPS}-step replica's)",
        before,
        after,
        _helps(before, max(after, 0.0)),
        0,
    )


def unfrozen(run: Run, evidence: Mapping[str, Any]) -> Treatment | None:
    """frozen_layer: the replica with every parameter trainable and in the optimizer."""
    names = [str(n) for n in evidence.get("unmoved_layers", ())]
    probe = _probe(run)
    model = _fresh(probe)
    for p in model.parameters():
        p.requires_grad_(True)
    layers = direct_parameters(model)
    if not names or any(n not in layers for n in names):
        return None
    start = {n: [p.detach().clone() for p in layers[n]] for n in names}
    if _replica(probe, run.config, rate=run.config.lr, model=model) is None:
        return None
    moved = min(_change(start[n], layers[n]) for n in names)
    return Treatment(
        "every parameter in the optimizer",
        f"the least change of {', '.join(names)}",
        0.0,
        moved,
        moved > 0.0,
        0,
    )


def wider(run: Run, evidence: Mapping[str, Any]) -> Treatment | None:
    """too_small_model: the model with every hidden layer narrower than twice the classes
    widened to that (a linear layer's features, a convolution's channels: :func:`_widened`),
    against as built, on the two measures of what a model can fit: the memorization probe
    (a handful of examples), and, where that does not settle it, a replica of the loop
    (:data:`WIDER_STEPS` steps each: a bottleneck that a handful of examples squeeze
    through shows on the task's batches once the easy part is learned)."""
    probe = _probe(run)
    width = WIDER * max(2, int(run.config.n_classes))
    if not _widenable(probe, width):
        return None
    fix = f"every hidden layer (a convolution's channels) narrower than {width} widened to it"
    base = _base_ratio(probe, evidence)
    treated = _memorized(probe, model=lambda: _rebuilt(probe, width))
    if _memo_helps(base, treated.ratio):
        return Treatment(fix, "the memorization probe's loss ratio", base, treated.ratio, True, 0)
    rate, steps = run.config.lr, WIDER_STEPS
    narrow = _replica(probe, run.config, rate=rate, steps=steps)
    wide = _replica(probe, run.config, rate=rate, steps=steps, model=_rebuilt(probe, width))
    if narrow is None or wide is None:
        return None
    before, after = _late(narrow), _late(wide)
    return Treatment(
        fix,
        f"the mean loss of a replica's last {LATE} of {steps} steps (the memorization "
        f"probe's ratio {base:.3g} -> {treated.ratio:.3g})",
        before,
        after,
        _helps(before, after),
        0,
    )


def as_logits(run: Run, evidence: Mapping[str, Any]) -> Treatment | None:
    """softmax_before_loss: memorization with the outputs turned back into logits."""
    probe = _probe(run)
    labels = run.config.kind in ("binary", "multilabel")
    base = _base_ratio(probe, evidence)
    treated = _memorized(probe, transform=_log_odds if labels else _log_probabilities)
    return Treatment(
        "logits instead of probabilities",
        "the memorization probe's loss ratio",
        base,
        treated.ratio,
        _memo_helps(base, treated.ratio),
        0,
    )


#: The fix each alarm implies, as the doctor suggests it (the one its treatment tries).
FIXES = {
    "huge_inputs": "standardize the inputs (subtract each feature's training mean, divide by "
    "its standard deviation)",
    "starved_loader": "feed the loop faster: more DataLoader workers, pinned memory, "
    "prefetching, or the data kept in memory",
    "frozen_layer": "put every layer's parameters in the optimizer, with requires_grad=True",
    "dead_units": "revive the units: a lower rate, another initialization (He, a small "
    "positive bias) or a leaky activation",
    "too_small_model": "widen the narrow layer (at least as wide as the classes it separates)",
    "label_mismatch": "check that the validation labels use the training labels' encoding "
    "and order",
    "missing_zero_grad": "clear the gradients every step: optimizer.zero_grad() before backward()",
    "lr_too_high": "lower the learning rate (try a tenth)",
    "softmax_before_loss": "hand the loss logits: remove the softmax or sigmoid before it",
    "unmasked_loss": "give the padding's and the prompt's labels the ignore index (-100)",
    "causal_mask_missing": "pass attention a causal mask",
    "loss_normalization": "average the micro-batches' losses (divide by the accumulation steps)",
    "labels_not_shifted": "shift the labels one position: each position predicts the next token",
    "resume_without_state": "save and restore the scheduler's (and the optimizer's) state "
    "when resuming",
}

TREATMENTS: dict[str, Callable[[Run, Mapping[str, Any]], Treatment | None]] = {
    "huge_inputs": standardized,
    "lr_too_high": lower_rate,
    "missing_zero_grad": cleared,
    "frozen_layer": unfrozen,
    "too_small_model": wider,
    "softmax_before_loss": as_logits,
}


# -- helpers -----------------------------------------------------------------------------


def _probe(run: Run) -> Probe:
    assert run.probe is not None
    return run.probe


def _fresh(probe: Probe) -> nn.Module:
    torch.manual_seed(0)  # deterministic whatever ran before
    model = probe.make_model()
    model.train()
    return model


def _floats(X: Any) -> bool:
    parts = X.values() if isinstance(X, dict) else X if isinstance(X, tuple) else (X,)
    return any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in parts)


def _standardize(X: Any) -> Any:
    """Each float feature to mean 0 and unit spread, computed in float64: a feature constant
    up to rounding (its spread below :data:`CONSTANT` of its size: a float32 column of
    large values is rarely exactly constant) carries nothing and becomes 0."""
    if isinstance(X, tuple):
        return tuple(_standardize(x) for x in X)
    if isinstance(X, dict):
        return {k: _standardize(v) for k, v in X.items()}
    if not (isinstance(X, torch.Tensor) and X.is_floating_point()) or len(X) < 2:
        return X
    x = X.double()
    mean = x.mean(0, keepdim=True)
    spread = x.std(0, keepdim=True)
    constant = spread <= CONSTANT * mean.abs().clamp_min(1.0)
    scaled = (x - mean) / torch.where(constant, torch.ones_like(spread), spread)
    return torch.where(constant, torch.zeros_like(scaled), scaled).to(X.dtype)


def _optimizer(config: RunConfig, model: nn.Module, rate: float) -> torch.optim.Optimizer | None:
    """The run's optimizer class (torch's, by its name) at ``rate``, else None."""
    found = getattr(torch.optim, config.optimizer, None)
    if not (isinstance(found, type) and issubclass(found, torch.optim.Optimizer)):
        return None
    make: Any = found  # a concrete optimizer: it takes the rate, as torch's all do
    built: torch.optim.Optimizer = make([p for p in model.parameters() if p.requires_grad], lr=rate)
    return built


def _replica(
    probe: Probe,
    config: RunConfig,
    *,
    rate: float,
    steps: int = STEPS,
    model: nn.Module | None = None,
    norms: list[float] | None = None,
) -> np.ndarray | None:
    """A replica of the run's loop on the probe's data: its per-step losses (inf from a
    non-finite one on), or None where the run's optimizer is not torch's; ``norms``, when
    given, gets each step's whole-model gradient norm."""
    model = model if model is not None else _fresh(probe)
    optimizer = _optimizer(config, model, rate)
    if optimizer is None:
        return None
    X, y = probe.train_data(min(probe.examples, EXAMPLES))
    size = max(1, min(int(config.batch_size) or 1, len(y)))
    losses = np.full(steps, np.inf)
    for step in range(steps):
        start = (step * size) % len(y)
        index = slice(start, min(start + size, len(y)))
        loss = probe.loss(probe.forward(model, rows(X, index)), y[index])
        losses[step] = float(loss.detach())
        if not math.isfinite(losses[step]):
            break
        optimizer.zero_grad()
        loss.backward()
        if norms is not None:
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        optimizer.step()
    return losses


def _late(losses: np.ndarray) -> float:
    tail = np.asarray(losses[-LATE:], dtype=np.float64)
    return float(tail.mean()) if np.all(np.isfinite(tail)) else math.inf


def _change(start: list[torch.Tensor], now: list[nn.Parameter]) -> float:
    moved = sum(float((p.detach() - s).norm() ** 2) for s, p in zip(start, now))
    size = sum(float(s.norm() ** 2) for s in start)
    return math.sqrt(moved / size) if size > 0 else math.sqrt(moved)


class _Treated(Probe):
    """The run's probe with another model, or its outputs transformed; its losses are the
    run's probe's (counted there)."""

    def __init__(
        self,
        probe: Probe,
        model: Callable[[], nn.Module] | None,
        transform: Callable[[torch.Tensor], torch.Tensor] | None,
    ) -> None:
        X, y = probe.train_data()
        super().__init__(model or probe.make_model, X, y, probe.loss)
        self._transform = transform

    def forward(self, model: nn.Module, inputs: Any) -> torch.Tensor:
        out = super().forward(model, inputs)
        return self._transform(out) if self._transform is not None else out


def _memorized(
    probe: Probe,
    *,
    model: Callable[[], nn.Module] | None = None,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Memorization:
    return memorize(_Treated(probe, model, transform))  # no key: never reused


def _memo_helps(base: float, treated: float) -> bool:
    """The untreated model did not memorize, and the treated one does or gets much closer.
    Where the untreated one memorized, the probe has nothing to show: it stops where the
    loss crosses :data:`MEMORIZED`, so a lower ratio is one step's overshoot, not a fix."""
    return base > MEMORIZED and (treated <= MEMORIZED or _helps(base, treated))


def _base_ratio(probe: Probe, evidence: Mapping[str, Any]) -> float:
    """The untreated memorization's ratio: the diagnosis's own reading where it has one (so
    it is not charged twice), else the probe's."""
    ratio = evidence.get("ratio")
    return float(ratio) if isinstance(ratio, (int, float)) else memorize(probe).ratio


def _log_probabilities(out: torch.Tensor) -> torch.Tensor:
    return torch.log(out.clamp_min(TINY))


def _log_odds(out: torch.Tensor) -> torch.Tensor:
    p = out.clamp(TINY, 1 - TINY)
    return torch.log(p) - torch.log1p(-p)


def _widened(model: nn.Module, width: int) -> nn.Module | None:
    """``model`` with every hidden layer narrower than ``width`` widened to it: a linear
    layer's features, a convolution's channels, with the normalizations that follow and
    the layer that reads it rebuilt to match (a linear layer reading a flattened map reads
    as many positions of each new channel). Only layers whose reader is in the same
    ``nn.Sequential`` are widened (the registry's models: MLPs, CNNs, the recurrent and
    tabular nets' dense layers); None where no layer can be."""
    widened = False
    for module in list(model.modules()):
        if isinstance(module, nn.Sequential):
            widened = _widen_sequence(module, width) or widened
    return model if widened else None


def _widen_sequence(seq: nn.Sequential, width: int) -> bool:
    """Widen, in place, the layers of ``seq`` narrower than ``width`` that a later layer of
    ``seq`` reads (its last mixing layer's output leaves it: never widened); whether any
    was. Where a widened layer's output reaches a layer it cannot be carried through (a
    recurrent cell, a user's module), ``seq`` is left as it was."""
    mixing = [name for name, m in seq.named_children() if isinstance(m, MIXING)]
    torch.manual_seed(0)  # the new layers' weights: the same whatever ran before
    replaced: dict[str, nn.Module] = {}
    units = (0, 0)  # what the last mixing layer put out: as built, and widened
    for name, module in seq.named_children():
        if isinstance(module, MIXING):
            into = _reads(module, *units)
            out = _units_out(module)
            wide = width if name != mixing[-1] and out < width else out
            if into is None:
                return False
            if into != _units_in(module) or wide != out:
                replaced[name] = _layer_like(module, into, wide)
            units = (out, wide)
        elif isinstance(module, NORMS) and units[0] != units[1]:
            norm = _norm_like(module, *units)
            if norm is None:
                return False
            replaced[name] = norm
        elif _has_params(module):
            if units[0] != units[1]:
                return False
            units = (0, 0)
    for name, module in replaced.items():
        setattr(seq, name, module)
    return bool(replaced)


#: The layers a widening rebuilds: those that mix features, and the normalizations after.
MIXING = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm)


def _units_in(layer: nn.Module) -> int:
    if isinstance(layer, nn.Linear):
        return layer.in_features
    assert isinstance(layer, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
    return layer.in_channels


def _units_out(layer: nn.Module) -> int:
    if isinstance(layer, nn.Linear):
        return layer.out_features
    assert isinstance(layer, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
    return layer.out_channels


def _reads(layer: nn.Module, before: int, after: int) -> int | None:
    """What ``layer`` reads once the layer before it puts out ``after`` units instead of
    ``before``: as many values per unit (a flattened map's positions) for a linear layer,
    the channels for an ungrouped convolution; None where that cannot be."""
    into = _units_in(layer)
    if before == after:
        return into
    if isinstance(layer, nn.Linear):
        return into // before * after if into % before == 0 else None
    return after if into == before and int(getattr(layer, "groups", 1)) == 1 else None


def _layer_like(layer: nn.Module, into: int, out: int) -> nn.Module:
    bias = layer.bias is not None
    if isinstance(layer, nn.Linear):
        return nn.Linear(into, out, bias=bias)
    assert isinstance(layer, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
    convolution: Any = type(layer)  # its own class: the kernel's dimensions match
    built: nn.Module = convolution(
        into,
        out,
        layer.kernel_size,
        stride=layer.stride,
        padding=layer.padding,
        dilation=layer.dilation,
        bias=bias,
        padding_mode=layer.padding_mode,
    )
    return built


def _norm_like(norm: nn.Module, before: int, after: int) -> nn.Module | None:
    """``norm`` over ``after`` units instead of ``before``; None where it normalizes
    something else, or its groups do not divide the new units."""
    if isinstance(norm, nn.LayerNorm):
        if tuple(norm.normalized_shape) != (before,):
            return None
        return nn.LayerNorm(after, eps=norm.eps, elementwise_affine=norm.elementwise_affine)
    if isinstance(norm, nn.GroupNorm):
        if norm.num_channels != before or after % norm.num_groups:
            return None
        return nn.GroupNorm(norm.num_groups, after, eps=norm.eps, affine=norm.affine)
    assert isinstance(norm, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d))
    if norm.num_features != before:
        return None
    return type(norm)(after, eps=norm.eps, momentum=norm.momentum, affine=norm.affine)


def _widenable(probe: Probe, width: int) -> bool:
    """Whether the probe's model has a layer :func:`_widened` widens, and runs once it is."""
    model = _widened(_fresh(probe), width)
    if model is None:
        return False
    X, _ = probe.train_data(2)
    try:
        with torch.no_grad():
            probe.forward(model, X)
    except RuntimeError:  # a widened layer's reader the walk could not see (a user's forward)
        return False
    return True


def hands_probabilities(run: Run) -> bool:
    """Whether the run's model, as built, puts out probabilities where the kind's loss takes
    logits: on the memorization probe's examples every output lies in [0, 1], and for
    classes each row sums to 1 (a softmax), for labels (binary, multilabel) any row does
    (a sigmoid). False without a probe, and for a kind whose loss takes values."""
    labels = run.config.kind in ("binary", "multilabel")
    if run.probe is None or not (labels or f.is_classes(run)):
        return False
    X, _ = run.probe.train_data(min(run.probe.examples, MEMORIZED_EXAMPLES))
    with torch.no_grad():
        out = run.probe.forward(_fresh(run.probe), X).double()
    if not bool(((out >= 0) & (out <= 1)).all()):
        return False
    return labels or bool(((out.sum(-1) - 1).abs() <= ROWS_SUM).all())


def _rebuilt(probe: Probe, width: int) -> nn.Module:
    model = _widened(_fresh(probe), width)
    assert model is not None  # the run's model was widened once already: it can be
    return model


def _has_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
