"""``faultbench report``: regenerate every table and figure under ``results/``."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from faultbench.cli.commands.common import (
    add_execution_arguments,
    engine_from,
    isolate_from,
    positive_int,
    store_from,
)
from faultbench.core.errors import FaultbenchError
from faultbench.core.limits import DEFAULT_TIMEOUT
from faultbench.scoring.board import FAULT_SEEDS, HEALTHY_SEEDS  # light: --help reads them

if TYPE_CHECKING:  # imported where used: `--help` must not load torch or pandas
    import pandas as pd

    from faultbench.scoring.evaluate import Report
    from faultbench.storage.store import Store
    from faultbench.training.engine import Engine

NAME = "report"
HELP = "regenerate results/ (tables, figures, provenance) from stored runs"

#: Files whose bytes change between two reports of the same runs (dates, seconds):
#: ``faultbench.reporting.provenance.WALL_CLOCK``, kept here so ``--help`` stays light.
VOLATILE = ("README.md", "timings.csv", "timings.md", "waits.csv", "diagnosers/*.json", "bench.*")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``report``."""
    parser.add_argument(
        "--seeds",
        type=positive_int,
        default=5,
        help="seeds per condition of the classic grid (default: 5)",
    )
    parser.add_argument(
        "--fault-seeds",
        type=positive_int,
        default=FAULT_SEEDS,
        help=f"runs per fault cell of the full grid, each on its own drawn base "
        f"(default: {FAULT_SEEDS}; healthy has {HEALTHY_SEEDS})",
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
    parser.add_argument(
        "--grids",
        type=_grids,
        default=["classic", "full"],
        help="comma-separated grids to score: classic (the tables of scores.md and the paper's "
        "reference comparison) and full (the leaderboard) (default: classic,full)",
    )
    parser.add_argument(
        "--full-grid-task",
        action="append",
        default=None,
        metavar="NAME",
        help="score the full grid on this task only; repeat for more (default: every task scored)",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write results even though the code has uncommitted changes (the README says so)",
    )
    add_execution_arguments(parser)


def _grids(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if "classic" not in names:
        raise argparse.ArgumentTypeError(
            f"'{text}': expected classic, optionally with full (results/ is built on the "
            "classic grid; full adds the leaderboard's runs)"
        )
    for name in names:
        if name not in ("classic", "full"):
            raise argparse.ArgumentTypeError(f"unknown grid '{name}'; expected classic or full")
    return names


def main(args: argparse.Namespace) -> int:
    """Check every argument and the git tree, score every diagnoser × task, write ``--out``."""
    from faultbench.reporting.provenance import (
        git_revision,
        other_bits_note,
        require_clean,
        source_root,
    )
    from faultbench.scoring.diagnosis import diagnoser_names, get_diagnoser
    from faultbench.tasks.task import get_task, task_names

    diagnosers = list(dict.fromkeys(args.diagnoser or in_report(diagnoser_names())))
    tasks = list(dict.fromkeys(args.task or task_names()))
    for name in diagnosers:
        get_diagnoser(name)  # unknown names fail here, before any worker starts
    for name in [*tasks, *(args.full_grid_task or [])]:
        get_task(name)
    full_tasks = [t for t in tasks if not args.full_grid_task or t in args.full_grid_task]
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise FaultbenchError(f"--out '{out}' is a file; expected a directory for the results")
    require_clean(source_root(), out=out, allow_dirty=args.allow_dirty)
    store = store_from(args)
    engine = engine_from(args)
    try:
        written = generate(
            out,
            tasks,
            diagnosers,
            seeds=args.seeds,
            fault_seeds=args.fault_seeds,
            store=store,
            engine=engine,
            timeout=args.timeout,
            command=_command_line(args),
            revision=git_revision(out=out),
            isolate=isolate_from(args),
            scored_grids=args.grids,
            full_tasks=full_tasks,
        )
    finally:
        engine.close()
    from faultbench.scoring import answers

    answers.compact(store.root / answers.FOLDER)  # the workers' segments, one file each
    for note in dict.fromkeys(store.notes):  # each evaluation reloads the grid: say it once
        print(f"faultbench: note: {note}", file=sys.stderr)
    if bits := other_bits_note():
        print(f"faultbench: note: {bits}", file=sys.stderr)
    print(f"wrote {len(written)} files under {args.out}/")
    return 0


def _command_line(args: argparse.Namespace) -> str:
    # The README shows the command that regenerates these results, and is
    # committed: a path of this machine (the store, an absolute --out) stays out.
    out = args.out if not Path(args.out).is_absolute() else Path(args.out).name
    parts = ["faultbench", "report", "--seeds", str(args.seeds), "--out", out]
    if args.fault_seeds != FAULT_SEEDS:
        parts += ["--fault-seeds", str(args.fault_seeds)]
    for name in args.task or []:
        parts += ["--task", name]
    for name in args.diagnoser or []:
        parts += ["--diagnoser", name]
    if args.grids != ["classic", "full"]:
        parts += ["--grids", ",".join(args.grids)]
    for name in args.full_grid_task or []:
        parts += ["--full-grid-task", name]
    if args.timeout != DEFAULT_TIMEOUT:  # a shorter limit than make report's can change scores
        parts += ["--timeout", f"{args.timeout:g}"]
    if args.allow_dirty:
        parts.append("--allow-dirty")
    return shlex.join(parts)


def generate(
    out: Path,
    tasks: Sequence[str],
    diagnosers: Sequence[str],
    *,
    seeds: int,
    store: Store,
    fault_seeds: int = FAULT_SEEDS,
    engine: Engine | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    command: str = "faultbench report",
    revision: str = "",
    isolate: bool | None = None,
    scored_grids: Sequence[str] = ("classic", "full"),
    full_tasks: Sequence[str] | None = None,
    healthy_seeds: int = HEALTHY_SEEDS,
) -> list[Path]:
    """Score, then write every table, figure and the README under ``out``.

    Stored runs are reused and missing ones trained (by the first evaluation of
    each task), so the fault table reads exactly the runs that were scored.

    Args:
        out: The results directory.
        tasks: Task names.
        diagnosers: Diagnoser names.
        seeds: Seeds per condition of the classic grid.
        store: Where the records are.
        fault_seeds: Runs per fault cell of the full grid, each on its own drawn base.
        engine: Where missing runs train.
        timeout: Seconds per diagnosis.
        command: The command line the README shows.
        revision: The code's git revision, for the README (looked up when empty).
        isolate: See :func:`faultbench.scoring.evaluate.evaluate`.
        scored_grids: "classic" (always) and, for the leaderboard's headline, "full"
            (with it, the real-bug suite: its leaderboard columns, realbugs.md, validity.md).
        full_tasks: The tasks the full grid is scored on (default: ``tasks``).
        healthy_seeds: Healthy runs of the full grid per task, each on its own drawn base.

    Returns:
        The files written, relative to ``out``.
    """
    import pandas as pd

    from faultbench.reporting import (
        ahead,
        assemble,
        calibration,
        figures,
        provenance,
        report,
        resultfile,
    )
    from faultbench.reporting.pages import write_docs
    from faultbench.reporting.realbugs import write as write_realbugs
    from faultbench.reporting.submission import evidence_from, score
    from faultbench.reporting.validity import grid_rates
    from faultbench.reporting.validity_files import write as write_validity
    from faultbench.scoring.board import REALBUGS, Board
    from faultbench.scoring.cache import reads_every_step
    from faultbench.scoring.contract import contract_of
    from faultbench.scoring.diagnosis import get_diagnoser
    from faultbench.tools.realbugs import evaluate_suite
    from faultbench.training.monitor import DEFAULT_EVERY

    full_tasks = (full_tasks or tasks) if "full" in scored_grids else ()
    board = Board(
        tuple(tasks),
        tuple(full_tasks),
        classic_seeds=seeds,
        fault_seeds=fault_seeds,
        healthy_seeds=healthy_seeds,
        cases=None if full_tasks else (),  # the suite is scored beside the full grid
        # Not from the lite runs dataset alone, unless every diagnoser's every-step answers
        # ship beside it (a fresh clone's report reads them and diagnoses nothing).
        every_step=all(
            reads_every_step(store, name)
            for name in diagnosers
            if contract_of(get_diagnoser(name)).reads_trace
        ),
    )
    contracts = {name: contract_of(get_diagnoser(name)) for name in diagnosers}
    evaluations = [
        ev
        for name in diagnosers
        for ev in board.evaluations(name, contracts[name])
        if ev.grid != REALBUGS  # the suite is diagnosed ahead by evaluate_suite
    ]
    trained = 0
    stages: list[tuple[str, float]] = []  # each stage's wall seconds, printed and kept
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        stages.append((stage, now - clock))
        clock = now

    if engine is not None:  # train everything at once, then diagnose on every worker
        trained = ahead.train_all(evaluations, store, engine)
        lap("verifying bases and training the grids' runs")
        ahead.diagnose_ahead(evaluations, store, engine, timeout=timeout, isolate=isolate)
        lap("diagnosing the grids' runs ahead, on every worker")
    # The real-bug suite: its cases trained and every diagnoser's answers stored on the
    # engine's workers (one diagnoser per worker), with the doctor's headlines that
    # realbugs.md and validity.md read; the result files below read the same answers.
    suite = evaluate_suite(
        diagnosers if full_tasks else [],
        store=store,
        timeout=timeout,
        isolate=isolate,
        engine=engine,
    )
    lap("the real-bug suite: training its cases and diagnosing them")
    # Each diagnoser's result file, from the answers stored ahead (a file whose answers are
    # unchanged is left as it was); every table below reads the same reports.
    folder = out / resultfile.FOLDER
    scored: list[Report] = []
    written: list[Path] = []
    for name in diagnosers:
        result, reports = score(
            name, board, store=store, engine=engine, timeout=timeout, isolate=isolate
        )
        written += resultfile.write(result, folder)
        scored += reports
        lap(f"{name}: its result file (stored answers read, the rest diagnosed)")
    reports = [r for r in scored if r.grid == "classic"]
    whole = [r for r in scored if r.prefix == 1.0]  # a prefix's reports: leaderboard_prefixes
    full = [r for r in whole if r.grid == "full" and r.every == DEFAULT_EVERY]
    every_step = [r for r in whole if r.grid == "full" and r.every == 1]
    grids: dict[str, report.Grid] = {task: report.load_grid(task, seeds, store) for task in tasks}
    trained += sum(r.trained for r in scored) + sum(r.trained for r in suite)
    faults = report.fault_table(grids)
    scores, mcnemar = report.score_table(reports), report.mcnemar_table(reports)
    timings, waits = provenance.timing_table(reports), provenance.wait_table(grids)
    overhead = provenance.instrument_overhead_table([*reports, *full, *every_step])
    cover, calib = calibration.coverage_frame(reports), calibration.calibration_frame(reports)
    out.mkdir(parents=True, exist_ok=True)
    texts = {
        "faults.md": report.faults_markdown(faults),
        "scores.md": report.scores_markdown(scores, mcnemar),
        "calibration.md": calibration.calibration_markdown(cover, calib),
        "timings.md": _timings_markdown(
            report.markdown_table, timings, waits, overhead, _stages_frame(stages)
        ),
        "bases.md": _bases_markdown(full),
    }
    frames = {
        "faults.csv": faults,
        "scores.csv": scores,
        "mcnemar.csv": mcnemar,
        "conditions.csv": provenance.conditions_table(),
        "setup.csv": provenance.setup_table(tasks, seeds),
        "timings.csv": timings,
        "waits.csv": waits,
        "coverage.csv": cover,
        "calibration.csv": calib,
    }
    written += [_write_csv(frame, out / name) for name, frame in frames.items()]
    written += [_write_text(text, out / name) for name, text in texts.items()]
    written += [
        figures.confusion_figure(r, out / "confusion" / f"{r.diagnoser}-{r.task}.png")
        for r in reports
    ]
    written += [figures.curves_figure(t, grids[t], out / "curves" / f"{t}.png") for t in tasks]
    for old in {*out.glob("confusion/*.png"), *out.glob("curves/*.png")} - set(written):
        old.unlink()  # a diagnoser or task dropped since the last report leaves no stale figure
    frame = pd.concat([r.scored_frame() for r in [*reports, *full, *every_step]], ignore_index=True)
    answers = pd.concat([r.answers_frame() for r in suite], ignore_index=True) if suite else None
    # The leaderboard from the result files alone (a diagnoser scored by its own target,
    # TrainCheck, stands beside these), as `faultbench leaderboard` assembles it.
    assembled = assemble.load(out, board)
    # The project's headline (README.md's markers) and docs/'s generated blocks are written
    # from the whole board only: a slice's leaderboard lacks the rows they name.
    whole_board = _whole_board(tasks, diagnosers, scored_grids)
    project = out.resolve().parent / "README.md"
    board_files = assemble.write(
        assembled,
        board,
        out,
        evidence=evidence_from(store),
        readme=project if whole_board else None,
    )
    written += [p for p in board_files if p != project]  # no file of results/
    if answers is not None:
        written += write_realbugs(answers, out)
        written += write_validity(grid_rates(frame), answers, out)
    files = sorted(str(p.relative_to(out)) for p in written)
    readme = provenance.readme(
        command,
        ["README.md", *files],
        grids,
        trained,
        revision=revision or provenance.git_revision(out=out),
        dataset=provenance.dataset_summary(out / "runs"),
    )
    written.append(_write_text(readme, out / "README.md"))
    if whole_board:
        write_docs(project.parent, out)  # the pages' generated blocks, from the files just written
    return sorted(p.relative_to(out) for p in written)


def _whole_board(
    tasks: Sequence[str], diagnosers: Sequence[str], scored_grids: Sequence[str]
) -> bool:
    """Whether a report scores make report's whole board: every task, both grids, every
    diagnoser a report scores by default."""
    from faultbench.scoring.diagnosis import diagnoser_names
    from faultbench.tasks.task import task_names

    every = set(in_report(diagnoser_names()))
    return set(tasks) == set(task_names()) and "full" in scored_grids and every <= set(diagnosers)


def _bases_markdown(full: Sequence[Report]) -> str:
    """``bases.md``: per task, the drawn bases of the full grid (see :func:`_bases_lines`)."""
    return "\n".join(
        [
            "# The full grid's drawn bases",
            "",
            "Every run of the full grid trains on its own base recipe drawn from the task's "
            "family of healthy designs, kept only if it trains healthy.",
            "",
            *[f"- {line}" for line in _bases_lines(full)],
            "",
        ]
    )


def _bases_lines(full: Sequence[Report]) -> list[str]:
    """Per task: the drawn bases, how many draws were rejected, which variants passed
    bases over (one line each, from the first report of each task: every diagnoser of a
    task is scored on the same plan), and which variants its designs mask."""
    from faultbench.faults.levels import hidden_on

    lines, seen = [], set()
    for r in full:
        if r.task in seen:
            continue
        seen.add(r.task)
        healthy = sum(1 for x in r.results if x.condition == "healthy" and x.drawn)
        passed: dict[str, int] = {}
        for variant, _, _ in r.passed_over:
            passed[variant] = passed.get(variant, 0) + 1
        over = ", ".join(f"{v} {n}" for v, n in sorted(passed.items())) or "none"
        lines.append(
            f"{r.task}: {healthy} healthy runs on drawn bases; {r.redraws} draws rejected "
            f"(did not train healthy) and drawn again; bases a variant could not apply to "
            f"and passed over: {over}"
        )
        if hidden := hidden_on(r.task):
            masked = "; ".join(f"{v} ({why})" for v, why in sorted(hidden.items()))
            lines.append(
                f"{r.task}: variants left out of the full grid, masked by the task's drawn "
                f"designs as calibrated (`faultbench calibrate`): {masked}"
            )
    return lines


def in_report(names: Sequence[str]) -> list[str]:
    """The diagnosers a report scores by default: all but those that declare
    ``left_out_of_report`` (a reason: a tool too slow for the report's budget; its result
    file comes from its own target, ``make traincheck``)."""
    from faultbench.scoring.contract import contract_of
    from faultbench.scoring.diagnosis import get_diagnoser

    return [name for name in names if not contract_of(get_diagnoser(name)).left_out_of_report]


def _stages_frame(stages: Sequence[tuple[str, float]]) -> pd.DataFrame:
    """Each stage of the report with its wall seconds, printed as the report ends."""
    import pandas as pd

    for stage, seconds in stages:
        print(f"faultbench report: {seconds:8.1f} s  {stage}", file=sys.stderr)
    return pd.DataFrame(
        [(stage, round(seconds, 1)) for stage, seconds in stages], columns=["stage", "seconds"]
    )


def _timings_markdown(
    table: Callable[[pd.DataFrame], str],
    timings: pd.DataFrame,
    waits: pd.DataFrame,
    overhead: pd.DataFrame | None = None,
    stages: pd.DataFrame | None = None,
) -> str:
    instruments = []
    if overhead is not None and len(overhead):
        instruments = [
            "## What each instrument added to training",
            "",
            "A diagnoser with an instrument (see leaderboard.md) reads runs trained again with "
            "the instrument in their loop. Per diagnoser, task and grid: the median over its "
            "runs of the run's training seconds with the instrument over the same run's "
            "seconds without it, each as measured when it trained (evaluations and the "
            "Monitor included on both sides). A run whose instrument gave up at its first "
            "step (Cockpit on a model BackPACK cannot extend) is not trained again, its "
            "record being the plain run's, and is not counted: 0 runs means the instrument "
            "could watch none of them. `faultbench bench` prices each instrument on "
            "three step sizes, interleaved on one machine.",
            "",
            table(overhead),
            "",
        ]
    return "\n".join(
        [
            "# Wall-clock measurements",
            "",
            "Measured on the machine in README.md: they vary between reports and machines, and "
            "no score is computed from them.",
            "",
            *(
                [
                    "## This report, stage by stage (wall seconds)",
                    "",
                    "A warm report reads what is stored; a cold one trains and diagnoses here.",
                    "",
                    table(stages),
                    "",
                ]
                if stages is not None and len(stages)
                else []
            ),
            "## Seconds per diagnosis and per training run",
            "",
            table(timings),
            "",
            "## Share of step time spent waiting for data (mean ± sd over seeds, last seed)",
            "",
            table(waits),
            "",
            *instruments,
        ]
    )


def _write_csv(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_csv(path, index=False, lineterminator="\n")
    return path


def _write_text(text: str, path: Path) -> Path:
    path.write_text(text)
    return path
