"""``faultbench report``: regenerate every table and figure under ``results/``."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from faultbench.cli.commands.common import add_execution_arguments, engine_from, positive_int
from faultbench.core.limits import DEFAULT_TIMEOUT

if TYPE_CHECKING:  # imported where used: `--help` must not load torch or pandas
    import pandas as pd

    from faultbench.scoring.evaluate import Report
    from faultbench.storage.store import Store
    from faultbench.training.engine import Engine

NAME = "report"
HELP = "regenerate results/ (tables, figures, provenance) from stored runs"

#: Files whose bytes change between two reports of the same runs (dates, seconds).
VOLATILE = ("README.md", "timings.csv", "timings.md")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``report``."""
    parser.add_argument(
        "--seeds", type=positive_int, default=5, help="seeds per condition (default: 5)"
    )
    parser.add_argument("--out", default="results", help="output directory (default: results)")
    parser.add_argument(
        "--diagnoser",
        action="append",
        default=None,
        metavar="NAME",
        help="a diagnoser to score; repeat for more (default: every registered)",
    )
    parser.add_argument(
        "--task",
        action="append",
        default=None,
        metavar="NAME",
        help="a task to score on; repeat for more (default: every registered)",
    )
    add_execution_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """Validate the names, score every diagnoser × task, write ``--out``."""
    from faultbench.scoring.diagnosis import diagnoser_names, get_diagnoser
    from faultbench.storage.store import Store
    from faultbench.tasks.task import get_task, task_names

    diagnosers = list(dict.fromkeys(args.diagnoser or diagnoser_names()))
    tasks = list(dict.fromkeys(args.task or task_names()))
    for name in diagnosers:
        get_diagnoser(name)  # unknown names fail here, before any worker starts
    for name in tasks:
        get_task(name)
    store = Store(args.store)
    engine = engine_from(args)
    try:
        written = generate(
            Path(args.out),
            tasks,
            diagnosers,
            seeds=args.seeds,
            store=store,
            engine=engine,
            timeout=args.timeout,
            command=_command_line(args),
        )
    finally:
        engine.close()
    for note in dict.fromkeys(store.notes):  # each evaluation reloads the grid: say it once
        print(f"faultbench: note: {note}", file=sys.stderr)
    print(f"wrote {len(written)} files under {args.out}/")
    return 0


def _command_line(args: argparse.Namespace) -> str:
    # The README shows the command that regenerates these results; the store is
    # machine-specific, so it is shown as given rather than resolved.
    parts = ["faultbench", "report", "--seeds", str(args.seeds), "--out", args.out]
    for name in args.task or []:
        parts += ["--task", name]
    for name in args.diagnoser or []:
        parts += ["--diagnoser", name]
    if args.store:
        parts += ["--store", args.store]
    return shlex.join(parts)


def generate(
    out: Path,
    tasks: Sequence[str],
    diagnosers: Sequence[str],
    *,
    seeds: int,
    store: Store,
    engine: Engine | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    command: str = "faultbench report",
) -> list[Path]:
    """Score, then write every table, figure and the README under ``out``.

    Stored runs are reused and missing ones trained (by the first evaluation of
    each task), so the fault table reads exactly the runs that were scored.

    Returns:
        The files written, relative to ``out``.
    """
    from faultbench.reporting import calibration, figures, provenance, report
    from faultbench.scoring.evaluate import evaluate

    reports: list[Report] = []
    grids: dict[str, report.Grid] = {}
    trained = 0
    for task in tasks:
        for name in diagnosers:
            result = evaluate(name, task, seeds=seeds, store=store, engine=engine, timeout=timeout)
            trained += result.trained
            reports.append(result)
        grids[task] = report.load_grid(task, seeds, store)
    faults = report.fault_table(grids)
    scores, mcnemar = report.score_table(reports), report.mcnemar_table(reports)
    timings = provenance.timing_table(reports)
    cover, calib = calibration.coverage_frame(reports), calibration.calibration_frame(reports)
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("confusion/*.png"), *out.glob("curves/*.png")]:
        old.unlink()  # a diagnoser or task dropped since the last report leaves no stale figure
    texts = {
        "faults.md": report.faults_markdown(faults),
        "scores.md": report.scores_markdown(scores, mcnemar),
        "calibration.md": calibration.calibration_markdown(cover, calib),
        "timings.md": "# Measured timings\n\nWall-clock seconds, measured on the machine in "
        "README.md; they vary between reports.\n\n" + report.markdown_table(timings) + "\n",
    }
    frames = {
        "faults.csv": faults,
        "scores.csv": scores,
        "mcnemar.csv": mcnemar,
        "conditions.csv": provenance.conditions_table(),
        "setup.csv": provenance.setup_table(tasks, seeds),
        "timings.csv": timings,
        "coverage.csv": cover,
        "calibration.csv": calib,
    }
    written = [_write_csv(frame, out / name) for name, frame in frames.items()]
    written += [_write_text(text, out / name) for name, text in texts.items()]
    written += [
        figures.confusion_figure(r, out / "confusion" / f"{r.diagnoser}-{r.task}.png")
        for r in reports
    ]
    written += [figures.curves_figure(t, grids[t], out / "curves" / f"{t}.png") for t in tasks]
    files = sorted(str(p.relative_to(out)) for p in written)
    readme = provenance.readme(command, ["README.md", *files], grids, trained, str(store.root))
    written.append(_write_text(readme, out / "README.md"))
    return sorted(p.relative_to(out) for p in written)


def _write_csv(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_csv(path, index=False, lineterminator="\n")
    return path


def _write_text(text: str, path: Path) -> Path:
    path.write_text(text)
    return path
