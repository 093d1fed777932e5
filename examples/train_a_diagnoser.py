"""Train a diagnoser from the runs dataset alone (pandas + scikit-learn), then score it.

    python examples/train_a_diagnoser.py [RUNS_DIR]   # fit on results/runs/ (or RUNS_DIR)
    FAULTBENCH_RUNS=RUNS_DIR faultbench run --task friedman \
        --diagnoser examples.train_a_diagnoser:TracesForest

It learns from the tuned-on tasks' runs only, and from known faults only: every other task,
the real-bug suite and the held-out faults stay whole programs and bugs it never saw
(docs/method.md, "Training on the runs dataset").
"""

import json
import os
import sys
from functools import cache

import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier

import faultbench as fb

TUNED_ON = frozenset({"diabetes", "digits", "numbers"})  # the tasks `rules` is tuned on
SERIES = ["loss", "val_acc", "grad_norm"]


def features(loss, val_acc, grad_norms, chance, start_loss):
    """A few numbers any trace has, relative to its task (chance score, starting loss)."""
    finite, val = loss[np.isfinite(loss)], val_acc[np.isfinite(val_acc)]
    total = np.sqrt(np.nansum(np.square(grad_norms), axis=0)) if len(grad_norms) else [1.0]
    x = [
        1 - len(finite) / max(1, len(loss)),  # share of steps whose loss is not finite
        np.log10(finite[0] / start_loss) if len(finite) else 6,  # the first loss, as expected?
        np.mean(finite[-max(1, len(finite) // 10) :]) / start_loss if len(finite) else 6,
        (val[-1] - chance) / (1 - chance) if len(val) else -1,  # last score, 0 at chance
        np.log10((total[-1] + 1e-12) / (total[0] + 1e-12)),  # did the gradients grow?
    ]
    return np.nan_to_num(np.array(x, dtype=float), nan=0.0, posinf=6.0, neginf=-6.0)


def _run_features(rows, config):
    """features() of one run: its rows of the traces table, its config (JSON: NaN as
    {"$float": "nan"})."""
    get = lambda series: np.array(list(rows[rows.series == series]["values"]), dtype=float)  # noqa: E731
    c = json.loads(config, object_hook=lambda d: float(d["$float"]) if "$float" in d else d)
    return features(
        get("loss")[0], get("val_acc")[0], get("grad_norm"), c["chance"], c["loss_reference"]
    )


def read_dataset(folder):
    """(X, y) of the tuned-on tasks' grid runs with one known fault or none."""
    tuned_on = ("task", "in", sorted(TUNED_ON))
    runs = pd.read_parquet(f"{folder}/runs", filters=[tuned_on])
    known = set(fb.condition_names())  # held-out faults are named to no diagnoser
    runs = runs[(runs.suite == "grid") & (runs.status == "ok") & runs.fault.isin(known)]
    traces = pd.read_parquet(f"{folder}/traces", filters=[tuned_on, ("series", "in", SERIES)])
    traces = dict(list(traces.groupby("key", observed=True)))
    X = [_run_features(traces[key], config) for key, config in zip(runs.key, runs.config)]
    return np.array(X), runs.fault.to_numpy()


@cache
def fitted(folder):
    X, y = read_dataset(folder)
    forest = RandomForestClassifier(200, class_weight="balanced", random_state=0)
    return forest.fit(X, y)


class TracesForest:
    """The forest, as a diagnoser: it reads the trace faultbench hands it."""

    name = "traces-forest"
    tuned_on = TUNED_ON

    def diagnose(self, run):
        forest = fitted(os.environ.get("FAULTBENCH_RUNS", "results/runs"))
        t, c = run.trace, run.config
        x = features(
            t.loss, t.val_acc, np.array(list(t.grad_norm.values())), c.chance, c.loss_reference
        )
        proba = forest.predict_proba(x.reshape(1, -1))[0]
        return fb.Diagnosis(str(forest.classes_[proba.argmax()]), float(proba.max()))


if __name__ == "__main__":
    folder = sys.argv[1] if len(sys.argv) > 1 else "results/runs"
    print(f"fitted on {sorted(TUNED_ON)}; labels: {' '.join(fitted(folder).classes_)}")
