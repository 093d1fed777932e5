"""``lr-range``: the learning-rate range test (torch-lr-finder 0.2.2) through the run's probe.

The tool trains the run's initialized model with its loss and training data
while the learning rate grows exponentially, and stops when the loss has
diverged; its suggestion is the rate of steepest descent of the (smoothed)
loss. It is run with its own defaults (``end_lr=10``, ``num_iter=100``,
``smooth_f=0.05``, ``diverge_th=5``) from the start rate of its README
example, 1e-7, on mini-batches of the run's size in a seeded order.

The tool publishes no decision rule beyond "use a rate below the steepest
descent". This adapter compares the run's rate with the suggestion and reads
four more things off the curve; each threshold was chosen on digits runs
only (the numbers beside each constant), so ``tuned_on`` is digits. It sees
faults in the model, the data and the rate; a bug in the loop
(missing_zero_grad, frozen_layer, starved_loader) does not reach the probe,
so those runs look healthy to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from faultbench.diagnosers import _tools
from faultbench.diagnosers._tools import Symptom
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Run

NAME = "lr-range"
START_LR = 1e-7  # the start rate of the tool's README example
END_LR = 10.0  # the tool's default end rate
NUM_ITER = 100  # the tool's default number of steps
SKIP_START, SKIP_END = 10, 5  # the tool's defaults for trimming the curve before suggesting
# Digits: healthy runs start at 1.0-1.1 ln C, huge inputs at 116-196 ln C.
START_FACTOR = 2.0
# Digits: the best smoothed loss over the first one is 0.52-0.57 healthy, 0.71-0.78 with
# dead units, 0.85-0.93 with too small a model; the cuts sit between those groups.
WEAK_FALL = 0.65
NO_FALL = 0.8
# Digits: the run's rate over the suggestion is 0.03 healthy, 0.2-0.4 with huge inputs,
# 2.2-3.2 at 100x the rate; 1 reads "faster than the tool's suggestion".
RATE_FACTOR = 1.0

#: What the range test reports, in the order it is trusted, and the label for it.
SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(
        "start_loss_high",
        "huge_inputs",
        f"first loss of the test > {START_FACTOR:g} ln C",
        "tuned on digits",
    ),
    Symptom(
        "never_diverged",
        "softmax_before_loss",
        f"the loss stayed finite and within the tool's divergence bound up to lr {END_LR:g}: "
        "a bounded loss",
        "the tool's divergence test (diverge_th=5); its label tuned on digits",
    ),
    Symptom(
        "loss_barely_falls",
        "too_small_model",
        f"best smoothed loss > {NO_FALL:g} x the first: no rate fits the data",
        "tuned on digits",
    ),
    Symptom(
        "loss_falls_slowly",
        "dead_units",
        f"best smoothed loss > {WEAK_FALL:g} x the first: part of the model does not learn",
        "tuned on digits",
    ),
    Symptom(
        "rate_above_suggestion",
        "lr_too_high",
        f"the run's rate > {RATE_FACTOR:g} x the tool's steepest-descent suggestion",
        "tuned on digits",
    ),
)


@dataclass(frozen=True)
class RangeTest:
    """What the tool reported about one run."""

    lrs: np.ndarray  # the rate of each step of the test
    losses: np.ndarray  # the smoothed loss of each step (the tool's history)
    suggestion: float | None  # the steepest-descent rate, None if too few steps to suggest


def range_test(run: Run, finder_class: Any) -> RangeTest:
    """Run the tool on a fresh copy of the run's model; every loss goes through the probe."""
    assert run.probe is not None
    probe = run.probe
    model = probe.make_model()
    X, y = probe.train_data()
    order = torch.Generator().manual_seed(run.seed)  # the same batches on every call
    loader = DataLoader(
        TensorDataset(X, y), batch_size=run.config.batch_size, shuffle=True, generator=order
    )
    optimizer = _tools.optimizer_class(run)(model.parameters(), lr=START_LR)
    with _tools.quiet(), _tools.one_thread():
        finder = finder_class(model, optimizer, probe.loss, device="cpu")
        finder.range_test(loader, end_lr=END_LR, num_iter=NUM_ITER)
        suggestion = _suggestion(finder)
    history = finder.history
    return RangeTest(np.asarray(history["lr"]), np.asarray(history["loss"]), suggestion)


def _suggestion(finder: Any) -> float | None:
    """The tool's own suggestion (it computes it while plotting, on a figure we discard)."""
    if len(finder.history["lr"]) < SKIP_START + SKIP_END + 2:
        return None
    from matplotlib.figure import Figure  # no pyplot: nothing is shown

    _, suggested = finder.plot(
        skip_start=SKIP_START, skip_end=SKIP_END, ax=Figure().subplots(), suggest_lr=True
    )
    return float(suggested)


def findings(run: Run, test: RangeTest) -> dict[str, Any]:
    """The numbers the symptoms compare, and whether each symptom is present."""
    finite = np.isfinite(test.losses)
    first = float(test.losses[0]) if len(test.losses) else math.nan
    best = float(test.losses[finite].min()) if finite.any() else math.nan
    stopped = len(test.losses) < NUM_ITER or not finite.all()
    fall = best / first if first > 0 and math.isfinite(first) else math.nan
    rate_ratio = run.config.lr / test.suggestion if test.suggestion else math.nan
    numbers = {
        "first_loss": first,
        "best_loss": best,
        "best_over_first": fall,
        "ln_c": _tools.ln_c(run),
        "suggested_lr": test.suggestion,
        "run_lr": run.config.lr,
        "run_lr_over_suggestion": rate_ratio,
        "steps": len(test.losses),
        "last_lr": float(test.lrs[-1]) if len(test.lrs) else math.nan,
        "diverged": stopped,
    }
    present = {
        "start_loss_high": not math.isfinite(first) or first > START_FACTOR * _tools.ln_c(run),
        "never_diverged": not stopped,
        "loss_barely_falls": not math.isfinite(fall) or fall > NO_FALL,
        "loss_falls_slowly": math.isfinite(fall) and fall > WEAK_FALL,
        "rate_above_suggestion": math.isfinite(rate_ratio) and rate_ratio > RATE_FACTOR,
    }
    return {"numbers": numbers, "present": present}


@DIAGNOSERS.register(NAME)
class LRRangeDiagnoser:
    """torch-lr-finder's range test through the probe; the run's rate against its suggestion."""

    name = NAME
    probes = True  # the range test trains the run's model through its probe
    tuned_on: frozenset[str] = frozenset({"digits"})
    subset_seeds = 1  # seconds per diagnosis: the report scores it on seed 0 of each grid
    reads_trace = False  # never reads run.trace: its answer cannot depend on the Monitor's sampling

    def __init__(self) -> None:
        self._finder = _tools.require("torch_lr_finder", diagnoser=NAME).LRFinder

    def diagnose(self, run: Run) -> Diagnosis:
        """Run the range test, then name the first symptom present (healthy if none)."""
        _tools.needs_probe(run, NAME)
        found = findings(run, range_test(run, self._finder))
        for symptom in SYMPTOMS:
            if found["present"][symptom.name]:
                return _tools.answer(symptom.label, symptom.name, found)
        return _tools.answer("healthy", "no symptom", found)
