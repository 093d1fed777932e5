"""``faultbench runs``: the board's runs as a dataset (export it, check it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from faultbench.cli.commands.common import positive_int
from faultbench.core.errors import FaultbenchError, unknown_name

NAME = "runs"
HELP = (
    "train the board's runs the store and dataset lack, export them as the Parquet runs "
    "dataset (results/runs/), or check one"
)
ACTIONS = ("train", "export", "check")
TIERS = ("lite", "full")  # faultbench.storage.dataset.TIERS (this module stays light)


def _action(text: str) -> str:
    if text not in ACTIONS:
        raise argparse.ArgumentTypeError(str(unknown_name("action", text, ACTIONS)))
    return text


def _tier(text: str) -> str:
    if text not in TIERS:
        raise argparse.ArgumentTypeError(str(unknown_name("tier", text, TIERS)))
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``runs``."""
    parser.add_argument(
        "action",
        type=_action,
        metavar="ACTION",
        help="train: every run of the board (both grids of every task, the real-bug suite) "
        "that neither the store nor the dataset holds; export: write every run of the store "
        "(and of the dataset it stands on) under the installed code's keys; check: verify a "
        "dataset's hashes and training code",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="the dataset folder (default: results/runs for the lite tier, "
        "results/runs-full for the full one)",
    )
    parser.add_argument(
        "--tier",
        type=_tier,
        default="lite",
        help="lite: traces as Monitor(every=20) records them, what the headline reads (the "
        "shipped tier); full: every step and the instruments' records (default: lite)",
    )
    parser.add_argument(
        "--task", action="append", default=[], metavar="NAME", help="only this task (repeat)"
    )
    parser.add_argument(
        "--store",
        default=None,
        help="record directory (default: $FAULTBENCH_STORE or ~/.cache/faultbench/runs)",
    )
    parser.add_argument(
        "--runs",
        default="default",
        metavar="DIR",
        help="train, export: the dataset the store stands on, whose runs are not trained "
        "again and are exported too (default: results/runs/); check: the dataset to check",
    )
    parser.add_argument(
        "--workers", type=positive_int, default=None, help="train: worker processes"
    )


def main(args: argparse.Namespace) -> int:
    """Export or check; print what was written or found."""
    from faultbench.storage.dataset import default_runs, open_runs

    if args.action == "check":
        dataset = open_runs(args.runs if args.runs != "default" else default_runs())
        if dataset is None:
            raise FaultbenchError(
                f"no runs dataset at '{args.runs}'; expected a folder written by "
                "`faultbench runs export`"
            )
        dataset.check_code()
        print(
            f"{dataset.folder}: {dataset.runs} runs of {len(dataset.tasks)} tasks, files "
            "match their manifest, made by the installed training code"
        )
        return 0
    return _train(args) if args.action == "train" else _export(args)


def _train(args: argparse.Namespace) -> int:
    """Train every run of ``make report``'s board (plain runs: an instrument's runs are the
    full tier's, trained by its diagnoser's scoring) that the store and dataset lack, and the
    runs a learned diagnoser fits on (its ``prepare``)."""
    import time

    from faultbench.cli.commands.report import in_report
    from faultbench.reporting import ahead
    from faultbench.scoring.board import REALBUGS, Board
    from faultbench.scoring.contract import contract_of
    from faultbench.scoring.diagnosis import diagnoser_names, get_diagnoser
    from faultbench.storage.store import Store
    from faultbench.tools.realbugs import evaluate_suite
    from faultbench.training.engine import make_engine

    start = time.perf_counter()
    store = Store(args.store, runs=args.runs)
    store.check()
    if store.runs is not None:
        store.runs.check_code()
    board = Board.default(args.task or None)
    plain = "always-healthy"  # a diagnoser without an instrument: the board's plain runs
    evaluations = [
        ev
        for ev in board.evaluations(plain, contract_of(get_diagnoser(plain)))
        if ev.grid != REALBUGS
    ]
    engine = make_engine("local", workers=args.workers, address=None)
    try:
        trained = ahead.train_all(evaluations, store, engine)
        if not args.task:
            trained += sum(r.trained for r in evaluate_suite([plain], store=store, engine=engine))
            for name in in_report(diagnoser_names()):  # a learned diagnoser's own runs too
                prepare = contract_of(get_diagnoser(name)).prepare
                if prepare is not None:
                    prepare(store=store, engine=engine)
    finally:
        engine.close()
    print(f"trained {trained} runs in {time.perf_counter() - start:.0f} s into {store.root}")
    return 0


def _export(args: argparse.Namespace) -> int:
    import platform
    import time

    from faultbench.reporting.provenance import processor_vendor
    from faultbench.storage.export import export
    from faultbench.storage.store import Store

    start = time.perf_counter()
    out = Path(args.out or ("results/runs" if args.tier == "lite" else "results/runs-full"))
    store = Store(args.store, runs=args.runs)
    store.check()
    records = store.records()
    shipped = store.runs
    if shipped is not None and (args.tier == "lite" or shipped.manifest.tier == "full"):
        records += shipped.records()  # a lite dataset's runs cannot fill the full tier
    current = [r for r in records if r.key == store.key(r.spec)]  # never another code's
    made = {
        "host": platform.node(),
        "processor": processor_vendor(),
        "python": platform.python_version(),
    }
    manifest = export(current, out, tier=args.tier, tasks=args.task, made=made)
    size = sum((out / name).stat().st_size for name in manifest.files)
    print(
        f"{out}: {manifest.runs} runs of {len(manifest.files) // 2} tasks ({args.tier} tier, every="
        f"{manifest.every}), {size / 1e6:.1f} MB, training code {manifest.training_code}, "
        f"in {time.perf_counter() - start:.1f} s"
    )
    return 0
