"""The results tables: how each fault looks, and how well each diagnoser names it.

Every table is built from stored run records and :class:`~faultbench.scoring.evaluate.Report`
objects, formatted to fixed-precision strings *before* it is written, so the CSV
and the Markdown show the same text and two reports from the same stored runs
are byte-identical. Wall-clock measurements never enter these tables: the
seconds of a report go to :func:`~faultbench.reporting.provenance.timing_table`
and the data-wait share each run measured while it trained to
:func:`~faultbench.reporting.provenance.wait_table`, which are kept apart, so
the tables here come out the same on any machine.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from faultbench.faults.fault import HEALTHY, canonical_conditions, condition_names
from faultbench.faults.fault import moot as faults_moot
from faultbench.scoring import stats
from faultbench.scoring.evaluate import Report, RunResult
from faultbench.scoring.scores import raises_alarm
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.training.engine import Engine

#: (condition, seed) -> the run's record, or None when the run failed to train.
Grid = dict[tuple[str, int], RunRecord | None]

FINAL_WINDOW = 30  # steps averaged for the final loss: one batch's loss is too noisy alone
DIGITS = 3  # decimals of every accuracy, loss and share


def fmt(value: float | None, digits: int = DIGITS) -> str:
    """Fixed-precision text of ``value``; ``nan`` for missing or non-finite values."""
    if value is None or not math.isfinite(value):
        return "nan" if value is None or math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.{digits}f}"


def fmt_p(value: float) -> str:
    """A p-value with four significant digits."""
    return f"{value:.4g}"


def load_grid(task: str, seeds: int, store: Store, engine: Engine | None = None) -> Grid:
    """Every canonical condition × seed of ``task``: stored records, missing ones trained.

    Args:
        task: A registered task name.
        seeds: Seeds 0 to ``seeds - 1``.
        store: Where records live (and where trained ones are written).
        engine: Where missing runs train; in this process when omitted.

    Returns:
        The grid; a run that failed to train maps to None.
    """
    the_task = get_task(task)
    specs = [
        RunSpec(the_task.name, the_task.fingerprint, cond, seed)
        for cond in canonical_conditions(task=the_task)
        for seed in range(seeds)
    ]
    grid: Grid = {}
    for spec, record, _ in ensure_records(specs, the_task, store=store, engine=engine):
        grid[(spec.condition.name, spec.seed)] = record if record.ok else None
    return grid


def _signals(record: RunRecord | None) -> dict[str, float]:
    if record is None or record.trace is None:
        return dict.fromkeys(("val_acc", "first_loss", "final_loss"), math.nan)
    trace = record.trace
    return {
        "val_acc": float(trace.val_acc[-1]) if len(trace.val_acc) else math.nan,
        "first_loss": float(trace.loss[0]) if trace.steps else math.nan,
        "final_loss": float(np.mean(trace.loss[-FINAL_WINDOW:])) if trace.steps else math.nan,
    }


def spread(values: pd.Series, name: str) -> dict[str, str]:
    """``<name>_mean``, ``<name>_sd`` (sample) and ``<name>_last`` of one signal over seeds."""
    return {
        f"{name}_mean": fmt(values.mean()),
        f"{name}_sd": fmt(values.std(ddof=1) if len(values) > 1 else math.nan),
        f"{name}_last": fmt(values.iloc[-1]),
    }


def ln_classes(task: str) -> float:
    """ln C, the loss a classifier over C classes starts near; NaN for a task that does not
    pick one of several classes (a regression, an autoencoder, multi-label tags: their
    first loss is read against their kind's own reference, not ln C)."""
    n_classes = get_task(task).n_classes
    return math.log(n_classes) if n_classes >= 2 else math.nan


def fault_table(grids: Mapping[str, Grid]) -> pd.DataFrame:
    """One row per task × condition: final accuracy, first loss vs ln C, final loss.

    Each signal is given as mean and sample sd over seeds, and the last seed's
    value. Nothing here is a wall-clock measurement (the data wait is in
    :func:`~faultbench.reporting.provenance.wait_table`).
    """
    rows = []
    for task, grid in grids.items():
        seeds = sorted({seed for _, seed in grid})
        cannot = faults_moot(get_task(task))  # why a fault cannot apply, if so
        for cond in condition_names():
            moot = cannot.get(cond, "")
            per_seed = pd.DataFrame([_signals(grid.get((cond, s))) for s in seeds], index=seeds)
            row = {
                "task": task,
                "condition": cond,
                "seeds": str(len(seeds)),
                "failed_runs": str(0 if moot else sum(grid.get((cond, s)) is None for s in seeds)),
                "not_applicable": moot,
                "ln_classes": fmt(ln_classes(task)),
            }
            for signal in per_seed.columns:
                row.update(spread(per_seed[signal], signal))
            rows.append(row)
    order = [
        "task",
        "condition",
        "seeds",
        "val_acc_mean",
        "val_acc_sd",
        "val_acc_last",
        "first_loss_mean",
        "first_loss_sd",
        "first_loss_last",
        "ln_classes",
        "final_loss_mean",
        "final_loss_sd",
        "final_loss_last",
        "failed_runs",
        "not_applicable",
    ]
    return pd.DataFrame(rows, columns=order)


def wilson(correct: int, total: int) -> tuple[float, float]:
    """The 95% Wilson score interval of ``correct / total`` (:func:`stats.wilson`)."""
    share = stats.wilson(correct, total)
    return share.low, share.high


def _recall(results: Sequence[RunResult], cond: str) -> float:
    runs = [r for r in results if r.condition == cond]
    return sum(r.correct for r in runs) / len(runs) if runs else math.nan


def score_row(report: Report) -> dict[str, str]:
    """One diagnoser × task: score, interval, false alarms, recall per condition, cost."""
    low, high = wilson(report.correct, report.total)
    healthy = [r for r in report.results if r.condition == HEALTHY]
    alarms = sum(raises_alarm(r.predicted) for r in healthy)
    train_steps = sum(r.train_steps for r in report.results)
    probe_steps = sum(r.probe_steps for r in report.results)
    row = {
        "diagnoser": report.diagnoser,
        "task": report.task,
        "split": "tuned-on" if report.tuned else "held-out",
        "correct": str(report.correct),
        "total": str(report.total),
        "accuracy": fmt(report.accuracy),
        "wilson_low": fmt(low),
        "wilson_high": fmt(high),
        "false_alarms": str(alarms),
        "healthy_runs": str(len(healthy)),
        "false_alarm_rate": fmt(alarms / len(healthy) if healthy else math.nan),
        "probe_steps_per_diagnosis": fmt(report.mean_probe_steps, 1),
        "probe_share_of_training": fmt(probe_steps / train_steps if train_steps else math.nan),
        "failed_answers": str(sum(report.failures.values())),
        "missed_visible": str(report.manifestation["missed_visible"]),
        "no_visible_effect": str(report.manifestation["invisible"]),
    }
    row.update({f"recall_{c}": fmt(_recall(report.results, c)) for c in condition_names()})
    return row


def score_table(reports: Sequence[Report]) -> pd.DataFrame:
    """One row per diagnoser × task, sorted by diagnoser then task."""
    frame = pd.DataFrame([score_row(r) for r in reports])
    return frame.sort_values(["diagnoser", "task"], kind="stable").reset_index(drop=True)


def mcnemar_table(reports: Sequence[Report]) -> pd.DataFrame:
    """Exact McNemar test between each pair of diagnosers on the same runs of a task.

    ``a_only`` (b) counts runs only diagnoser A named correctly, ``b_only`` (c) runs
    only B did; the exact test is the two-sided binomial test of b out of b + c at 1/2.
    """
    rows = []
    by_task: dict[str, list[Report]] = {}
    for report in reports:
        by_task.setdefault(report.task, []).append(report)
    for task in sorted(by_task):
        ranked = sorted(by_task[task], key=lambda r: r.diagnoser)
        for a, b in itertools.combinations(ranked, 2):
            right_a = {(r.condition, r.seed): r.correct for r in a.results}
            right_b = {(r.condition, r.seed): r.correct for r in b.results}
            runs = sorted(right_a.keys() & right_b.keys())
            only_a = sum(right_a[k] and not right_b[k] for k in runs)
            only_b = sum(right_b[k] and not right_a[k] for k in runs)
            both = sum(right_a[k] and right_b[k] for k in runs)
            discordant = only_a + only_b
            p = stats.mcnemar_p(only_a, only_b)
            rows.append(
                {
                    "task": task,
                    "diagnoser_a": a.diagnoser,
                    "diagnoser_b": b.diagnoser,
                    "runs": str(len(runs)),
                    "a_only": str(only_a),
                    "b_only": str(only_b),
                    "both": str(both),
                    "neither": str(len(runs) - discordant - both),
                    "p_value": fmt_p(float(p)),
                }
            )
    columns = [
        "task",
        "diagnoser_a",
        "diagnoser_b",
        "runs",
        "a_only",
        "b_only",
        "both",
        "neither",
        "p_value",
    ]
    return pd.DataFrame(rows, columns=columns)


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of a frame of strings (no extra dependency)."""
    escape = lambda text: str(text).replace("|", "\\|")  # noqa: E731  (a cell's pipe ends it)
    lines = [
        "| " + " | ".join(escape(c) for c in frame.columns) + " |",
        "|" + "|".join("---" for _ in frame.columns) + "|",
    ]
    lines += [
        "| " + " | ".join(escape(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join(lines)


def _pm(row: pd.Series, signal: str) -> str:
    return f"{row[f'{signal}_mean']} ± {row[f'{signal}_sd']}"


def faults_view(faults: pd.DataFrame, task: str) -> pd.DataFrame:
    """The readable table of one task: mean ± sd beside the last seed's value."""
    rows = faults[faults["task"] == task]
    return pd.DataFrame(
        {
            "condition": rows["condition"],
            "val acc": [_pm(r, "val_acc") for _, r in rows.iterrows()],
            "acc (last seed)": rows["val_acc_last"],
            "first loss": [_pm(r, "first_loss") for _, r in rows.iterrows()],
            "ln C": rows["ln_classes"],
            "first (last seed)": rows["first_loss_last"],
            "final loss": [_pm(r, "final_loss") for _, r in rows.iterrows()],
            "final (last seed)": rows["final_loss_last"],
            "not applicable": rows["not_applicable"],
        }
    )


def faults_markdown(faults: pd.DataFrame) -> str:
    """``results/faults.md``: one section per task."""
    parts = [
        "# How each fault looks",
        "",
        f"Mean ± sample sd over seeds, then the last seed's value. *val acc*: "
        f"validation accuracy at the last evaluation. *first loss* beside *ln C*: a model "
        f"that knows nothing starts near ln C. *final loss*: mean training loss of the last "
        f"{FINAL_WINDOW} steps. The share of step time spent waiting for data is a "
        f"wall-clock measurement, so it is in `timings.md` and `waits.csv`, not here.",
    ]
    for task in dict.fromkeys(faults["task"]):
        seeds = faults.loc[faults["task"] == task, "seeds"].iloc[0]
        parts += ["", f"## {task} ({seeds} seeds)", "", markdown_table(faults_view(faults, task))]
    return "\n".join(parts) + "\n"


def scores_view(scores: pd.DataFrame) -> pd.DataFrame:
    """The readable score table: accuracy with its Wilson interval, false alarms, cost."""
    return pd.DataFrame(
        {
            "diagnoser": scores["diagnoser"],
            "task": scores["task"],
            "split": scores["split"],
            "correct": scores["correct"] + "/" + scores["total"],
            "accuracy [95% Wilson]": scores["accuracy"]
            + " ["
            + scores["wilson_low"]
            + ", "
            + scores["wilson_high"]
            + "]",
            "false alarms": scores["false_alarms"]
            + "/"
            + scores["healthy_runs"]
            + " ("
            + scores["false_alarm_rate"]
            + ")",
            "probe steps / diagnosis": scores["probe_steps_per_diagnosis"],
            "failed answers": scores["failed_answers"],
            "missed though the fault showed": scores["missed_visible"],
            "faulty runs with no visible effect": scores["no_visible_effect"],
        }
    )


def recall_view(scores: pd.DataFrame) -> pd.DataFrame:
    """Recall per condition (rows) for each diagnoser on each task (columns)."""
    view = pd.DataFrame({"condition": condition_names()})
    for _, row in scores.iterrows():
        view[f"{row['diagnoser']} / {row['task']}"] = [
            row.get(f"recall_{c}", "") for c in view.condition
        ]
    return view


def scores_markdown(scores: pd.DataFrame, mcnemar: pd.DataFrame) -> str:
    """``results/scores.md``: scores, recall per condition, paired tests."""
    return (
        "\n".join(
            [
                "# Diagnoser scores",
                "",
                "*tuned-on*: the diagnoser was tuned on this task; *held-out*: it never saw it. "
                "*false alarms*: healthy runs called anything but healthy. Cost is counted in "
                "probe training steps per diagnosis (deterministic); measured seconds are in "
                "`timings.md`.",
                "",
                markdown_table(scores_view(scores)),
                "",
                "## Recall per condition",
                "",
                markdown_table(recall_view(scores)),
                "",
                "## Paired comparison: exact McNemar test",
                "",
                "On the same runs of a task: *A only* counts runs only diagnoser A named "
                "correctly, "
                "*B only* runs only B did. p is the two-sided exact binomial test of *A only* out "
                "of *A only* + *B only* at 1/2 (the exact McNemar test).",
                "",
                markdown_table(mcnemar.rename(columns={"a_only": "A only", "b_only": "B only"})),
            ]
        )
        + "\n"
    )
