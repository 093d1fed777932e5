"""Recall against severity: how mild can a fault be and still be named?"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from faultbench.core.errors import FaultbenchError
from faultbench.core.limits import DEFAULT_TIMEOUT
from faultbench.faults.fault import FAULTS, condition
from faultbench.scoring.diagnosis import Diagnoser, get_diagnoser
from faultbench.scoring.evaluate import evaluate
from faultbench.storage.store import Store
from faultbench.tasks.task import Task, get_task
from faultbench.training.engine import Engine

RELIABLE = 0.8  # recall at which a severity counts as "detected reliably"


@dataclass(frozen=True)
class Sweep:
    """A fault's recall by one diagnoser at each severity, mildest first."""

    fault: str  # the swept fault
    diagnoser: str  # who was asked
    task: str  # on which task
    tuned: bool  # whether the task is in the diagnoser's tuned_on
    table: pd.DataFrame  # severity, runs, named, recall, predictions (most common answers)

    @property
    def smallest_reliable(self) -> float | None:
        """The mildest severity from which recall stays at or above ``RELIABLE``."""
        found = None
        for severity, recall in zip(self.table["severity"][::-1], self.table["recall"][::-1]):
            if recall < RELIABLE:
                break
            found = float(severity)
        return found


def sweep(
    fault: str,
    diagnoser: str | Diagnoser,
    task: str | Task,
    *,
    severities: Sequence[float] | None = None,
    seeds: int = 3,
    store: Store | str | None = None,
    engine: Engine | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    isolate: bool | None = None,
) -> Sweep:
    """Evaluate ``diagnoser`` on ``fault`` at each severity (default: its range's grid).

    Raises:
        FaultbenchError: an unknown fault, a fault with no severity knob, or a
            severity out of range.
    """
    spec = FAULTS.get(fault)
    if spec.severity is None:
        raise FaultbenchError(
            f"Fault '{fault}' has no severity knob; expected one of "
            f"{', '.join(n for n in FAULTS.names() if FAULTS.get(n).severity)}"
        )
    values = spec.severity.milder_to_worse(severities) if severities else spec.severity.grid()
    conditions = [condition((fault, v)) for v in values]  # validates every severity
    diag, the_task = get_diagnoser(diagnoser), get_task(task)
    report = evaluate(
        diagnoser,  # as asked: by name, a shipped diagnoser's answers are stored and read back
        the_task,
        seeds=seeds,
        conditions=conditions,
        store=store,
        engine=engine,
        timeout=timeout,
        isolate=isolate,
    )
    rows = []
    for value in values:
        results = [r for r in report.results if r.severity == value]
        answers = pd.Series([r.predicted for r in results]).value_counts()
        rows.append(
            {
                "severity": value,
                "runs": len(results),
                "named": sum(r.predicted == fault for r in results),
                "recall": sum(r.predicted == fault for r in results) / max(1, len(results)),
                "answers": ", ".join(f"{k} x{v}" for k, v in answers.items()),
            }
        )
    return Sweep(fault, diag.name, the_task.name, report.tuned, pd.DataFrame(rows))


def sweep_markdown(result: Sweep) -> str:
    """The sweep as a Markdown section: the table and the smallest reliable severity."""
    from faultbench.reporting.report import markdown_table

    kind = "tuned-on" if result.tuned else "held-out"
    shown = result.table.assign(
        severity=[f"{v:g}" for v in result.table["severity"]],
        recall=[f"{v:.2f}" for v in result.table["recall"]],
    )
    reliable = result.smallest_reliable
    verdict = (
        f"smallest severity detected reliably (recall >= {RELIABLE:g}): {reliable:g}"
        if reliable is not None
        else f"no severity reaches recall {RELIABLE:g} at the severe end"
    )
    return (
        f"# {result.diagnoser} on {result.fault}, {result.task} ({kind})\n\n"
        f"{markdown_table(shown)}\n\n{verdict}\n"
    )


def save_sweep(result: Sweep, out: Path) -> list[Path]:
    """Write the sweep's table (.csv, .md) and its plot (.png) under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{result.fault}-{result.diagnoser}-{result.task}"
    result.table.to_csv(stem.with_suffix(".csv"), index=False, float_format="%.6g")
    stem.with_suffix(".md").write_text(sweep_markdown(result))
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    ax.plot(result.table["severity"], result.table["recall"], marker="o")
    ax.axhline(RELIABLE, color="grey", linestyle=":", label=f"reliable ({RELIABLE:g})")
    ax.set_xscale("log" if result.table["severity"].min() > 0 else "linear")
    if not FAULTS.get(result.fault).severity.worse_when_higher:  # type: ignore[union-attr]
        ax.invert_xaxis()  # mild on the left, as for every other fault
    ax.set(
        xlabel=f"severity ({FAULTS.get(result.fault).severity.meaning})",  # type: ignore[union-attr]
        ylabel="recall",
        ylim=(-0.05, 1.05),
        title=f"{result.diagnoser} on {result.fault} ({result.task})",
    )
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=110)
    plt.close(fig)
    return [stem.with_suffix(s) for s in (".csv", ".md", ".png")]
