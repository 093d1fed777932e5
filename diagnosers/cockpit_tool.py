"""``cockpit``: Cockpit's economy instruments (cockpit-for-pytorch 1.0.2) inside a replay.

Cockpit has no post-hoc mode: it instruments a training loop through
BackPACK. This adapter replays the monitored loop through the run's probe
(see :mod:`faultbench.diagnosers._tools`: the model as initialized, its loss
and data, the run's optimizer, rate, batch size, steps and batch order) with
Cockpit's ``economy`` configuration: Alpha, Distance, GradHist1d, GradNorm,
InnerTest, Loss, NormTest, OrthoTest and UpdateSize. ``economy`` is the only
one that runs on every run: BackPACK has no second-order extension for an
``nn.Softmax`` module, which a softmax_before_loss run ends in. The
instruments are tracked on every ``TRACK_EVERY``-th step, the per-example
losses Alpha needs are the same cross-entropy of the same forward pass at
``reduction="none"`` (no extra probe step), and Cockpit counts from step 0.
A model with parameters BackPACK gives no individual gradients (a GRU's:
BackPACK 1.7.1 has no extension for it) cannot be instrumented; the adapter
finds that out in one probe step and answers ``unknown``.

Cockpit shows curves to a person; it publishes readings (α > 0 overshoots,
a gradient histogram piled at zero) but no decision thresholds. Each threshold
below was chosen on digits runs only, so ``tuned_on`` is digits. The replay
carries faults of the model, the data and the rate, not the loop's own bugs:
missing_zero_grad, frozen_layer and starved_loader replay as healthy runs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.diagnosers import _tools
from faultbench.diagnosers._tools import Symptom
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Run

NAME = "cockpit"
CONFIGURATION = "economy"  # the only one that runs with an nn.Softmax module
TRACK_EVERY = 10  # 60 tracked steps of digits' 600; every step would cost ~5x the replay
# Thresholds, each chosen on digits runs only (5 seeds of the ten conditions).
# Digits: Loss at step 0 is 2.1-2.6 (about ln C) except with huge inputs, 324-439.
START_FACTOR = 2.0
# Alpha's published reading: above 1 the step lands past the far side of the local
# parabola. Digits: the share of such steps is 0-0.05 except at 100x the rate, 0.12-0.26.
OVERSHOOT = 1.0
OVERSHOOT_SHARE = 0.08
# Digits: GradNorm / Loss at step 0 is 0.036-0.064 with a softmax head, 0.105 and up otherwise.
WEAK_GRADIENT = 0.08
# Digits: the median share of individual gradient elements in the two GradHist1d bins at
# 0 is 0.953-0.962 on healthy-like runs, 0.977-0.979 with dead units (thin), 0.66-0.69
# with too small a model.
ZERO_SHARE = 0.97
# Digits: the median Loss of the last five tracked steps over the first is <= 0.02 on
# healthy-like runs, 0.12-0.29 with dead units, 0.58-0.73 with too small a model.
STALL = 0.45
LATE_STEPS = 5  # tracked steps the late loss is the median of (the last 50 steps of digits)

#: What Cockpit's instruments show, in the order they are trusted, and the label for each.
SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(
        "start_loss_high",
        "huge_inputs",
        f"Loss at step 0 > {START_FACTOR:g} ln C",
        "tuned on digits",
    ),
    Symptom(
        "steps_overshoot",
        "lr_too_high",
        f"Alpha > {OVERSHOOT:g} (the step lands past the far side of the local parabola) "
        f"on more than {OVERSHOOT_SHARE:.0%} of tracked steps",
        "Alpha's published reading; shares tuned on digits",
    ),
    Symptom(
        "weak_gradient",
        "softmax_before_loss",
        f"GradNorm at step 0 < {WEAK_GRADIENT:g} x the Loss at step 0",
        "tuned on digits",
    ),
    Symptom(
        "gradients_at_zero",
        "dead_units",
        f"GradHist1d: median share of individual gradient elements in the bins at 0 "
        f"> {ZERO_SHARE:g}",
        "tuned on digits",
    ),
    Symptom(
        "loss_stalls",
        "too_small_model",
        f"median Loss of the last {LATE_STEPS} tracked steps > {STALL:g} x the Loss at step 0",
        "tuned on digits",
    ),
)


def instrument(run: Run, cockpit: Any, backpack: Any) -> dict[int, dict[str, Any]]:
    """Replay the run with Cockpit attached; return Cockpit's output by step."""
    from cockpit.utils import schedules
    from cockpit.utils.configuration import configuration

    assert run.probe is not None
    model = backpack.extend(run.probe.make_model())
    quantities = configuration(CONFIGURATION, track_schedule=schedules.linear(TRACK_EVERY))
    cp = cockpit.Cockpit(model.parameters(), quantities=quantities)

    def backward(
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        output: torch.Tensor,
        target: torch.Tensor,
        loss: torch.Tensor,
    ) -> None:
        info = {
            "batch_size": len(target),
            "individual_losses": F.cross_entropy(output, target, reduction="none"),
            "loss": loss,
            "optimizer": optimizer,
        }
        with cp(step - 1, info=info):
            loss.backward(create_graph=cp.create_graph(step - 1))

    with _tools.quiet():
        _tools.replay(run, model=model, backward=backward)
        return dict(cp.get_output())


def uninstrumented(run: Run, backpack: Any) -> list[str]:
    """Parameters BackPACK computes no individual gradients for (a GRU's, for one).

    One probe step on the first batch; Cockpit's economy instruments all need
    those gradients, and without them they fail deep inside the tool.
    """
    assert run.probe is not None
    model = backpack.extend(run.probe.make_model())
    X, y = run.probe.train_data(run.config.batch_size)
    loss = run.probe.loss(model(X), y)
    with _tools.quiet(), backpack.backpack(backpack.extensions.BatchGrad()):
        loss.backward()
    return [n for n, p in model.named_parameters() if getattr(p, "grad_batch", None) is None]


def summarize(output: dict[int, dict[str, Any]]) -> dict[str, float]:
    """The few numbers the symptoms read off Cockpit's instruments."""
    steps = sorted(output)

    def series(quantity: str) -> list[Any]:
        return [output[s][quantity] for s in steps if quantity in output[s]]

    losses = np.asarray([float(v) for v in series("Loss")])
    alphas = np.asarray([float(v) for v in series("Alpha")])
    alphas = alphas[np.isfinite(alphas)]
    grad_norms = series("GradNorm")
    start_grad = math.sqrt(sum(float(g) ** 2 for g in grad_norms[0])) if grad_norms else math.nan
    hists = series("GradHist1d")
    return {
        "start_loss": float(losses[0]) if len(losses) else math.nan,
        "late_loss": float(np.median(losses[-LATE_STEPS:])) if len(losses) else math.nan,
        "alpha_median": float(np.median(alphas)) if len(alphas) else math.nan,
        "overshoot_share": float(np.mean(alphas > OVERSHOOT)) if len(alphas) else math.nan,
        "start_grad_norm": start_grad,
        "zero_share": _median([_central_share(h) for h in hists]),
        "clipped_share": _median([_edge_share(h) for h in hists]),
        "update_size_median": _median([_total(u) for u in series("UpdateSize")]),
        "distance_last": _total(series("Distance")[-1]) if series("Distance") else math.nan,
        "norm_test_median": _median([float(v) for v in series("NormTest")]),
        "inner_test_median": _median([float(v) for v in series("InnerTest")]),
        "ortho_test_median": _median([float(v) for v in series("OrthoTest")]),
        "tracked_steps": float(len(steps)),
    }


def _counts(hist: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    counts = np.asarray(torch.as_tensor(hist["hist"]).double())
    edges = np.asarray(torch.as_tensor(hist["edges"]).double())
    return counts, edges


def _central_share(hist: dict[str, Any]) -> float:
    # The bins within one bin width of zero: exact zeros and rounding-level values.
    counts, edges = _counts(hist)
    centers, width = (edges[:-1] + edges[1:]) / 2, float(edges[1] - edges[0])
    total = counts.sum()
    return float(counts[np.abs(centers) < width].sum() / total) if total else math.nan


def _edge_share(hist: dict[str, Any]) -> float:
    # GradHist1d clips outliers into its outermost bins.
    counts, _ = _counts(hist)
    total = counts.sum()
    return float((counts[0] + counts[-1]) / total) if total else math.nan


def _total(per_parameter: Any) -> float:
    return math.sqrt(sum(float(v) ** 2 for v in per_parameter))


def _median(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan


def present(run: Run, numbers: dict[str, float]) -> dict[str, bool]:
    """Which symptoms the numbers show."""
    start, last = numbers["start_loss"], numbers["late_loss"]
    return {
        "start_loss_high": not math.isfinite(start) or start > START_FACTOR * _tools.ln_c(run),
        "steps_overshoot": numbers["overshoot_share"] > OVERSHOOT_SHARE,
        "gradients_at_zero": numbers["zero_share"] > ZERO_SHARE,
        "weak_gradient": numbers["start_grad_norm"] < WEAK_GRADIENT * start,
        "loss_stalls": not math.isfinite(last) or last > STALL * start,
    }


@DIAGNOSERS.register(NAME)
class CockpitDiagnoser:
    """Cockpit's economy instruments inside a replay of the run's loop through its probe."""

    name = NAME
    probes = True  # the replay trains the run's model through its probe
    tuned_on: frozenset[str] = frozenset({"digits"})
    subset_seeds = 1  # seconds per diagnosis: the report scores it on seed 0 of each grid
    reads_trace = False  # never reads run.trace: its answer cannot depend on the Monitor's sampling

    def __init__(self) -> None:
        self._backpack = _tools.require("backpack", diagnoser=NAME)
        self._cockpit = _tools.require("cockpit", diagnoser=NAME)

    def diagnose(self, run: Run) -> Diagnosis:
        """Replay with Cockpit, then name the first symptom present (healthy if none)."""
        _tools.needs_probe(run, NAME)
        missing = uninstrumented(run, self._backpack)
        if missing:
            return _tools.answer(
                "unknown", "cockpit cannot instrument this model", {"no_batch_grad": missing}
            )
        try:
            output = instrument(run, self._cockpit, self._backpack)
        except NotImplementedError as exc:  # BackPACK lacks an extension for a module
            return _tools.answer(
                "unknown", "cockpit cannot instrument this model", {"why": str(exc)}
            )
        numbers = summarize(output)
        shown = present(run, numbers)
        found = {"numbers": numbers, "present": shown}
        for symptom in SYMPTOMS:
            if shown[symptom.name]:
                return _tools.answer(symptom.label, symptom.name, found)
        return _tools.answer("healthy", "no symptom", found)
