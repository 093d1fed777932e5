"""``weightwatcher``: WeightWatcher 0.7.7's spectral analysis of the run's final weights.

WeightWatcher needs the trained weights, which the trace does not hold. The
adapter replays the monitored loop through the run's probe (see
:mod:`faultbench.diagnosers._tools`), deterministically and to the run's last
step, then runs ``WeightWatcher(model).analyze()`` with its defaults on the
final weights and, as the reference the tool has no other way to get, on the
initial ones. The replay carries the faults of the model, the data and the
rate; it cannot carry the loop's own bugs (missing_zero_grad, frozen_layer,
starved_loader), so for those runs the tool analyzes healthy weights.

Published: a layer's power-law exponent alpha below 2 is "over-trained",
above 6 "under-trained" (the tool's own ``warning`` column). It publishes
nothing that names a training fault; the mapping below, and every threshold
that is not alpha's, was chosen on digits runs only.
"""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from faultbench.diagnosers import _tools
from faultbench.diagnosers._tools import Symptom
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Run

NAME = "weightwatcher"
OVER_TRAINED = 2.0  # published: alpha below 2 is over-trained (the tool's warning column)
# Digits: the largest final/initial spectral-norm ratio over layers is 5-8 on healthy-like
# runs, 8.6-10 with a softmax head, 530-2130 at 100x the rate, 0.9-1.0 with huge inputs.
BLOWN_UP = 100.0
UNMOVED = 2.0
GREW_MUCH = 8.2  # thin on digits: healthy-like runs reach 7.85, softmax runs start at 8.62

#: What the spectral analysis shows, in the order it is trusted, and the label for each.
SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(
        "weights_not_finite",
        _tools.OTHER_FAULT,
        "the replay's final weights hold NaN or Inf: the tool cannot analyze them",
        "no threshold",
    ),
    Symptom(
        "hidden_layer_skipped",
        "too_small_model",
        "the tool skipped a hidden Linear layer as too small to fit (fewer than its "
        "min_evals=8 eigenvalues)",
        "the tool's default min_evals",
    ),
    Symptom(
        "spectral_norm_blown_up",
        "lr_too_high",
        f"largest final/initial spectral-norm ratio of a layer > {BLOWN_UP:g}",
        "tuned on digits",
    ),
    Symptom(
        "spectra_unmoved",
        "huge_inputs",
        f"largest final/initial spectral-norm ratio < {UNMOVED:g}: the weights kept "
        "their initial spectrum",
        "tuned on digits",
    ),
    Symptom(
        "last_layer_over_trained",
        "dead_units",
        f"alpha of the last Linear layer (the logits) < {OVER_TRAINED:g}: the tool's "
        "over-trained warning",
        "published alpha; its label tuned on digits",
    ),
    Symptom(
        "spectral_norm_grew",
        "softmax_before_loss",
        f"largest final/initial spectral-norm ratio > {GREW_MUCH:g}",
        "tuned on digits",
    ),
)


def analyze(watcher_class: Any, model: nn.Module) -> list[dict[str, Any]]:
    """The tool's per-layer table, one dict per analyzed layer, in layer order."""
    with _tools.quiet():
        table = watcher_class(model=model).analyze()
    if table is None or len(table) == 0:
        return []
    columns = ["longname", "alpha", "warning", "spectral_norm", "stable_rank", "num_pl_spikes"]
    return [{c: row[c] for c in columns if c in table.columns} for row in table.to_dict("records")]


def linear_layers(model: nn.Module) -> list[str]:
    """Names of the model's Linear layers, in order (the last one makes the logits)."""
    return [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]


def findings(
    model: nn.Module, final: list[dict[str, Any]], initial: list[dict[str, Any]], finite: bool
) -> dict[str, Any]:
    """The numbers the symptoms compare, and whether each symptom is present."""
    start = {row["longname"]: float(row["spectral_norm"]) for row in initial}
    growth = {
        row["longname"]: float(row["spectral_norm"]) / start[row["longname"]]
        for row in final
        if start.get(row["longname"], 0.0) > 0
    }
    largest = max(growth.values(), default=math.nan)
    alphas = {row["longname"]: float(row["alpha"]) for row in final}
    layers = linear_layers(model)
    skipped = [name for name in layers[:-1] if name not in alphas]
    # The layer that makes the logits; NaN when the tool skipped it (fewer classes than
    # its min_evals) or the model has no Linear layer.
    last_alpha = alphas.get(layers[-1], math.nan) if layers else math.nan
    numbers = {
        "layers": final,
        "spectral_norm_growth": growth,
        "largest_growth": largest,
        "skipped_hidden_layers": skipped,
        "last_layer_alpha": last_alpha,
        "weights_finite": finite,
    }
    present = {
        "weights_not_finite": not finite,
        "hidden_layer_skipped": bool(skipped),
        "spectral_norm_blown_up": math.isfinite(largest) and largest > BLOWN_UP,
        "spectra_unmoved": math.isfinite(largest) and largest < UNMOVED,
        "last_layer_over_trained": math.isfinite(last_alpha) and last_alpha < OVER_TRAINED,
        "spectral_norm_grew": math.isfinite(largest) and largest > GREW_MUCH,
    }
    return {"numbers": numbers, "present": present}


@DIAGNOSERS.register(NAME)
class WeightWatcherDiagnoser:
    """WeightWatcher on the final weights of a replay of the run through its probe."""

    name = NAME
    probes = True  # the replay trains the run's model through its probe
    tuned_on: frozenset[str] = frozenset({"digits"})
    subset_seeds = 1  # seconds per diagnosis: the report scores it on seed 0 of each grid
    reads_trace = False  # never reads run.trace: its answer cannot depend on the Monitor's sampling

    def __init__(self) -> None:
        self._watcher = _tools.require("weightwatcher", diagnoser=NAME).WeightWatcher

    def diagnose(self, run: Run) -> Diagnosis:
        """Replay, analyze the final and initial weights, name the first symptom present."""
        _tools.needs_probe(run, NAME)
        replayed = _tools.replay(run)
        finite = _tools.finite_weights(replayed.model)
        final = analyze(self._watcher, replayed.model) if finite else []
        initial = analyze(self._watcher, replayed.initial)
        found = findings(replayed.model, final, initial, finite)
        for symptom in SYMPTOMS:
            if found["present"][symptom.name]:
                return _tools.answer(symptom.label, symptom.name, found)
        return _tools.answer("healthy", "no symptom", found)
