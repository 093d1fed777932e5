"""Arguments shared by several sub-commands."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.core.limits import DEFAULT_TIMEOUT
from faultbench.training.engine import ENGINES

if TYPE_CHECKING:  # imported where used: `--help` must not load torch
    from faultbench.scoring.board import Board
    from faultbench.storage.store import Store
    from faultbench.training.engine import Engine


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1, else one clear line (exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer of at least 1; got '{text}'"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 1; got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer of at least 0 (a seed), else one clear line (exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer of at least 0; got '{text}'"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 0; got {value}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds, else one clear line (exit 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds; got '{text}'"
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds; got {text}")
    return value


def engine_name(text: str) -> str:
    """argparse type: one of :data:`ENGINES`, else the nearest valid name (exit 2)."""
    if text not in ENGINES:
        raise argparse.ArgumentTypeError(str(unknown_name("engine", text, ENGINES)))
    return text


def add_runs_argument(parser: argparse.ArgumentParser) -> None:
    """``--runs``: the runs dataset a store stands on."""
    parser.add_argument(
        "--runs",
        default="default",
        metavar="DIR",
        help="the runs dataset to read runs from before training any (default: "
        "$FAULTBENCH_RUNS, else results/runs/ of this checkout; 'none': train into the "
        "store alone)",
    )


def add_execution_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store``, ``--engine``, ``--workers``, ``--address``, ``--timeout``, ``--in-process``."""
    parser.add_argument(
        "--store",
        default=None,
        help="record directory (default: $FAULTBENCH_STORE or ~/.cache/faultbench/runs)",
    )
    add_runs_argument(parser)
    parser.add_argument(
        "--engine",
        type=engine_name,
        default="local",
        help=f"where runs train: {', '.join(ENGINES)} (default: local)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="worker processes (default: one per core)",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="Dask scheduler address, e.g. tcp://HOST:8786 (with --engine dask)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT,
        help=f"seconds one diagnosis may take (default: {DEFAULT_TIMEOUT:g}), a positive number; "
        "a diagnosis past it is stopped (its worker killed) and counted wrong",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="diagnose in this process even with a diagnoser that does not ship with faultbench "
        "(faster; but one that hangs in C code or crashes cannot be stopped)",
    )


def check_engine(args: argparse.Namespace) -> None:
    """Refuse engine arguments that do not go together, before anything starts."""
    if args.address and args.engine != "dask":
        raise FaultbenchError(
            f"--address '{args.address}' needs --engine dask; got --engine {args.engine}"
        )


def engine_from(args: argparse.Namespace) -> Engine:
    """The engine the arguments ask for."""
    from faultbench.training.engine import make_engine

    check_engine(args)
    return make_engine(args.engine, workers=args.workers, address=args.address)


def store_from(args: argparse.Namespace) -> Store:
    """The store the arguments ask for, refused at once if it can never be one (or if the
    runs dataset it stands on was made by other training code)."""
    from faultbench.storage.store import Store

    store = Store(args.store, runs=getattr(args, "runs", "default"))
    store.check()
    if store.runs is not None:
        store.runs.check_code()  # a dataset of other training code would retrain every run
    return store


def isolate_from(args: argparse.Namespace) -> bool | None:
    """``evaluate``'s ``isolate``: False with ``--in-process``, else let it decide."""
    return False if getattr(args, "in_process", False) else None


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    """``--grid``, ``--faults``, ``--variants``, ``--levels``: which runs are scored."""
    parser.add_argument(
        "--grid",
        default="full",
        help="full (every variant at mild/moderate/severe, and the held-out faults) or "
        "classic (the nine at their canonical severities) (default: full)",
    )
    parser.add_argument(
        "--faults", type=_names, default=None, help="comma-separated faults to keep (and healthy)"
    )
    parser.add_argument(
        "--variants",
        type=_names,
        default=None,
        help="comma-separated variants to keep, as fault.variant or the variant's name",
    )
    parser.add_argument(
        "--levels",
        type=_names,
        default=None,
        help="comma-separated levels to keep: mild, moderate, severe, canonical, fixed",
    )
    parser.add_argument(
        "--healthy-seeds",
        type=positive_int,
        default=None,
        help="healthy runs of the full grid, each on its own drawn base (default: 50)",
    )
    parser.add_argument(
        "--every",
        type=positive_int,
        default=None,
        help="read each trace as Monitor(every=K) would have recorded it (default: the "
        "Monitor's default, 20, the trace users have; 1: every step)",
    )


def grid_from(args: argparse.Namespace) -> dict[str, Any]:
    """``evaluate``'s grid arguments, every name checked (one line, exit 2, before any work)."""
    from faultbench.faults.grid import check_selection
    from faultbench.scoring.evaluate import SAMPLINGS_READ
    from faultbench.training.monitor import DEFAULT_EVERY

    check_selection(args.grid, args.faults, args.variants, args.levels)
    every = DEFAULT_EVERY if args.every is None else args.every
    if every not in SAMPLINGS_READ:
        raise unknown_name("--every", str(every), [str(k) for k in SAMPLINGS_READ])
    return {
        "grid": args.grid,
        "faults": args.faults,
        "variants": args.variants,
        "levels": args.levels,
        "healthy_seeds": args.healthy_seeds,
        "every": every,
    }


def add_board_arguments(parser: argparse.ArgumentParser) -> None:
    """``--task``, ``--seeds``, ``--fault-seeds``, ``--healthy-seeds``, ``--faults``,
    ``--cases``, ``--results``: the board (``make report``'s by default)."""
    from faultbench.scoring.board import CLASSIC_SEEDS, FAULT_SEEDS, HEALTHY_SEEDS, PREFIXES

    parser.add_argument(
        "--results", default="results", help="the results directory (default: results)"
    )
    parser.add_argument(
        "--task",
        action="append",
        default=None,
        metavar="NAME",
        help="a task of the board; repeat for more (default: every registered task)",
    )
    parser.add_argument(
        "--seeds",
        type=positive_int,
        default=CLASSIC_SEEDS,
        help=f"seeds per condition of the classic grid (default: {CLASSIC_SEEDS})",
    )
    parser.add_argument(
        "--fault-seeds",
        type=positive_int,
        default=FAULT_SEEDS,
        help=f"runs per fault cell of the full grid (default: {FAULT_SEEDS})",
    )
    parser.add_argument(
        "--healthy-seeds",
        type=positive_int,
        default=HEALTHY_SEEDS,
        help=f"healthy drawn runs per task of the full grid (default: {HEALTHY_SEEDS})",
    )
    parser.add_argument(
        "--faults",
        type=_names,
        default=None,
        help="comma-separated faults to keep (and healthy) on both grids (default: all)",
    )
    parser.add_argument(
        "--grids",
        type=_names,
        default=["classic", "full"],
        help="comma-separated grids of the board: classic and full (default: classic,full)",
    )
    parser.add_argument(
        "--cases",
        type=_cases,
        default=None,
        help="comma-separated real-bug cases, or 'none' (default: every case)",
    )
    parser.add_argument(
        "--prefixes",
        type=_prefixes,
        default=PREFIXES,
        help="comma-separated shares of each full-grid run it is also scored on, cut there, "
        f"or 'none' (default: {','.join(f'{p:g}' for p in PREFIXES)})",
    )


def _cases(text: str) -> list[str]:
    return [] if text.strip() == "none" else _names(text)


def _prefixes(text: str) -> tuple[float, ...]:
    """Shares of a run, each one of the board's (a trace is cut only where it was marked)."""
    from faultbench.scoring.board import PREFIXES

    if text.strip() == "none":
        return ()
    shares = []
    for name in _names(text):
        try:
            share = float(name)
        except ValueError:
            share = math.nan
        if share not in PREFIXES:
            raise argparse.ArgumentTypeError(
                f"prefix '{name}': expected one of {', '.join(f'{p:g}' for p in PREFIXES)} "
                "(the shares a stored run is marked at), or 'none'"
            )
        shares.append(share)
    return tuple(dict.fromkeys(shares))


def board_from(args: argparse.Namespace) -> Board:
    """The board the arguments ask for, every name checked (one line, exit 2)."""
    from faultbench.faults.grid import check_selection
    from faultbench.realbugs import get_case
    from faultbench.scoring.board import Board
    from faultbench.tasks.task import get_task, task_names

    tasks = tuple(dict.fromkeys(args.task or task_names()))
    for name in tasks:
        get_task(name)
    for grid in args.grids:
        check_selection(grid)
    check_selection("full", args.faults)
    for name in args.cases or ():
        get_case(name)
    return Board(
        tasks,
        tasks if "full" in args.grids else (),
        classic_seeds=args.seeds,
        fault_seeds=args.fault_seeds,
        healthy_seeds=args.healthy_seeds,
        cases=None if args.cases is None else tuple(args.cases),
        faults=None if args.faults is None else tuple(args.faults),
        prefixes=tuple(args.prefixes),
    )
