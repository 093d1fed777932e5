"""The text of a report: what ``faultbench run`` and ``print(report)`` show.

The confusion matrix keeps the full condition names on its rows and gives its
columns short codes, spelled out in a legend below it, so that a task's
conditions plus ``unknown`` fit in a 100-column terminal (a wider matrix
continues in a second block).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import pandas as pd

from faultbench.scoring.diagnosis import UNKNOWN

WIDTH = 100  # columns the text must fit in


def short_labels(names: Sequence[str]) -> dict[str, str]:
    """A distinct short code per name: the initials of its words, or its first three letters."""
    out: dict[str, str] = {}
    for name in names:
        words = [w for w in name.replace("+", "_").replace("-", "_").split("_") if w]
        code = "".join(w[0] for w in words) if len(words) > 1 else name[:3]
        base, n = code, 2
        while code in out.values():
            code, n = f"{base}{n}", n + 1
        out[name] = code
    return out


def matrix_text(frame: pd.DataFrame) -> str:
    """The confusion matrix with short column codes, and its legend."""
    codes = short_labels([str(c) for c in frame.columns])
    short = frame.rename(columns=codes)
    short.columns.name = "true \\ predicted"
    short.index.name = None
    legend = [f"{code} = {name}" for name, code in codes.items()]
    # A matrix wider than the terminal (a task with a language model's labels, or a
    # diagnoser answering them) continues below, as pandas wraps it: never past WIDTH.
    return short.to_string(line_width=WIDTH) + "\n" + "\n".join(packed("columns:", legend))


def packed(head: str, entries: Sequence[str]) -> list[str]:
    """``head`` and the comma-separated entries, never split, in lines of at most WIDTH."""
    lines, line = [], head
    for i, entry in enumerate(entries):
        text = f" {entry}" + ("," if i < len(entries) - 1 else "")
        if len(line) + len(text) > WIDTH:
            lines.append(line)
            line = " "
        line += text
    return [*lines, line]


def render(report: Any) -> str:
    """The human-readable summary of a :class:`~faultbench.scoring.evaluate.Report`."""
    kind = "tuned-on" if report.tuned else "held-out"
    tuned_on = ", ".join(report.tuned_on) or "nothing"
    seen = report.manifestation
    cover = coverage(report.results)
    lines = [
        f"{report.diagnoser} on {report.task} ({kind}; tuned on: {tuned_on})",
        "",
        matrix_text(report.confusion),
        "",
        f"{report.correct}/{report.total} correct ({kind}; {report.grid} grid)",
        *packed(
            "per seed:",
            [
                f"seed {s}: {int(r.correct)}/{int(r.total)}"
                for s, r in report.seed_scores.iterrows()
            ],
        ),
        *score_lines(report.scores),
        f"probe steps per diagnosis: {report.mean_probe_steps:.0f} "
        f"(training steps per run: {report.mean_train_steps:.0f})",
        f"faulty runs: {seen['faulty_runs']}, named {seen['named']}, "
        f"missed though the fault showed {seen['missed_visible']},",
        f"  missed with no visible effect {seen['missed_invisible']} "
        f"(no visible effect in all: {seen['invisible']})",
        f"answered (not unknown): {cover['coverage']:.0%}",
        f"runs trained now: {report.trained}",
    ]
    for fault, why in report.not_applicable:
        lines += textwrap.wrap(
            f"not applicable on {report.task}: {fault} ({why})", WIDTH, subsequent_indent="  "
        )
    lines += failure_lines(report)
    return "\n".join(lines)


def failure_lines(report: Any) -> list[str]:
    """How many answers failed, then each distinct message (its first line) with its count."""
    if not report.failures:
        return []
    lines = [
        "failed answers (counted wrong): "
        + ", ".join(f"{k}: {v}" for k, v in sorted(report.failures.items()))
    ]
    for status, message, n in report.failure_messages:
        lines.append(f"  {n} x {status}: {message}")
    return lines


def coverage(results: Sequence[Any]) -> dict[str, float | None]:
    """Share of runs answered (not ``unknown``), and accuracy on those."""
    answered = [r for r in results if r.status == "ok" and r.predicted != UNKNOWN]
    return {
        "coverage": len(answered) / max(1, len(results)),
        "selective_accuracy": (
            sum(r.correct for r in answered) / len(answered) if answered else None
        ),
        "abstained": float(len(results) - len(answered)),
    }


def _share(cell: dict[str, Any]) -> str:
    if not cell["n"]:
        return "n/a"
    interval = f"[95% {cell['low']:.2f}, {cell['high']:.2f}]"
    return f"{cell['hits']}/{cell['n']} = {cell['value']:.3f} {interval}"


def score_lines(scores: dict[str, Any]) -> list[str]:
    """Identification (overall and per level), detection and false alarms, with intervals."""
    ident = scores["identification"]
    lines = [f"identification (known faults): {_share(ident['accuracy'])}"]
    lines += [f"  {level}: {_share(cell)}" for level, cell in ident["by_level"].items()]
    detect = scores["detection"]
    if detect["not_healthy"]["n"]:
        lines.append(f"held-out faults not called healthy: {_share(detect['not_healthy'])}")
        lines.append(f"held-out faults called other_fault: {_share(detect['other_fault'])}")
    lines.append(f"false alarms (healthy runs called faulty): {_share(scores['false_alarms'])}")
    return lines
