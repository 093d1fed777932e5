"""Two faults at once: which pairs make sense, and how multi-label answers score.

A diagnoser may name several labels (``Diagnosis.also``). A single-label
diagnoser is scored fairly: besides exact-set accuracy (which it cannot win
on a pair), it gets a *hit* for naming one of the two faults, and per-fault
recall counts each fault it names.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from faultbench.faults.fault import FAULTS, HEALTHY, Condition, condition, moot
from faultbench.scoring.evaluate import Report, RunResult
from faultbench.tasks.task import Task

#: Pairs left out, with why: the second fault hides the first by construction.
INCOMPATIBLE: dict[frozenset[str], str] = {
    frozenset({"dead_units", "frozen_layer"}): "a frozen layer of dead units is just dead units",
    frozenset({"dead_units", "too_small_model"}): "killing 90% of a 2-unit layer leaves no layer",
}


def pair_conditions(
    faults: Iterable[str] | None = None, task: Task | None = None
) -> list[Condition]:
    """Every compatible pair of faults, each at its canonical severity; with ``task``, of
    the faults that can apply to it (a pair with a fault the task cannot have, a causal
    mask on a model with no attention, would score a run against a fault it does not hold)."""
    names = list(faults) if faults is not None else FAULTS.names()
    if task is not None:
        left_out = moot(task)
        names = [name for name in names if name not in left_out]
    return [
        condition(a, b)
        for a, b in itertools.combinations(names, 2)
        if frozenset({a, b}) not in INCOMPATIBLE
    ]


def answer_set(result: RunResult) -> frozenset[str]:
    """The labels a result names (``healthy``/``unknown`` name no fault)."""
    labels = {result.predicted, *result.also}
    return frozenset(labels - {HEALTHY, "unknown"})


def truth_set(result: RunResult) -> frozenset[str]:
    """The faults injected in the run."""
    return frozenset(result.condition.split("+")) - {HEALTHY}


@dataclass(frozen=True)
class PairScore:
    """Multi-label scores of one diagnoser on a pair grid."""

    runs: int  # runs scored
    exact: float  # share of runs whose answer set equals the injected set
    hit: float  # share naming at least one injected fault and no other fault
    jaccard: float  # mean |answer & truth| / |answer | truth|
    recall: pd.Series  # per fault: share of runs containing it where it was named
    per_pair: pd.DataFrame  # per pair: runs, exact, hit, the most common answer

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "runs": self.runs,
            "exact_set_accuracy": self.exact,
            "hit_rate": self.hit,
            "mean_jaccard": self.jaccard,
            "recall": {k: float(v) for k, v in self.recall.items()},
        }


def score_pairs(results: Sequence[RunResult]) -> PairScore:
    """Score multi-fault results."""
    exact = hit = jaccard = 0.0
    named: dict[str, list[bool]] = {}
    for r in results:
        answer, truth = answer_set(r), truth_set(r)
        exact += answer == truth
        hit += bool(answer & truth) and answer <= truth
        jaccard += len(answer & truth) / len(answer | truth) if answer | truth else 1.0
        for fault in truth:
            named.setdefault(fault, []).append(fault in answer)
    n = max(1, len(results))
    recall = pd.Series({f: sum(v) / len(v) for f, v in sorted(named.items())}, name="recall")
    return PairScore(len(results), exact / n, hit / n, jaccard / n, recall, _per_pair(results))


def _per_pair(results: Sequence[RunResult]) -> pd.DataFrame:
    rows = []
    for pair in dict.fromkeys(r.condition for r in results):
        runs = [r for r in results if r.condition == pair]
        answers = pd.Series(["+".join(sorted(answer_set(r))) or r.predicted for r in runs])
        rows.append(
            {
                "pair": pair,
                "runs": len(runs),
                "exact": sum(answer_set(r) == truth_set(r) for r in runs) / len(runs),
                "hit": sum(
                    bool(answer_set(r) & truth_set(r)) and answer_set(r) <= truth_set(r)
                    for r in runs
                )
                / len(runs),
                "most_common_answer": answers.mode().iloc[0],
            }
        )
    return pd.DataFrame(rows)


def save_pairs(report: Report, score: PairScore, out: Path) -> list[Path]:
    """Write the per-pair table (.csv) and a Markdown summary; return both paths."""
    from faultbench.reporting.report import markdown_table

    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{report.diagnoser}-{report.task}"
    score.per_pair.to_csv(stem.with_suffix(".csv"), index=False, float_format="%.4f")
    kind = "tuned-on" if report.tuned else "held-out"
    shown = score.per_pair.assign(
        exact=[f"{v:.2f}" for v in score.per_pair["exact"]],
        hit=[f"{v:.2f}" for v in score.per_pair["hit"]],
    )
    recall = pd.DataFrame(
        {"fault": score.recall.index, "recall": [f"{v:.2f}" for v in score.recall.values]}
    )
    text = (
        f"# {report.diagnoser} on pairs of faults, {report.task} ({kind})\n\n"
        f"{score.runs} runs; exact-set accuracy {score.exact:.3f}; hit rate (named one or both "
        f"faults and nothing else) {score.hit:.3f}; mean Jaccard {score.jaccard:.3f}.\n\n"
        f"{_left_out(report)}"
        f"## Recall per fault\n\n{markdown_table(recall)}\n\n"
        f"## Per pair\n\n{markdown_table(shown)}\n"
    )
    stem.with_suffix(".md").write_text(text)
    return [stem.with_suffix(".csv"), stem.with_suffix(".md")]


def _left_out(report: Report) -> str:
    if not report.not_applicable:
        return ""
    names = ", ".join(f"{name} ({why})" for name, why in report.not_applicable)
    return f"Faults that cannot apply to {report.task}, in no pair: {names}.\n\n"
