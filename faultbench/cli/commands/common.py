"""Arguments shared by several sub-commands."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from faultbench.core.errors import FaultbenchError
from faultbench.core.limits import DEFAULT_TIMEOUT
from faultbench.training.engine import ENGINES

if TYPE_CHECKING:  # imported where used: `--help` must not load torch
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


def add_execution_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store``, ``--engine``, ``--workers``, ``--address``, ``--timeout``."""
    parser.add_argument(
        "--store",
        default=None,
        help="record directory (default: $FAULTBENCH_STORE or ~/.cache/faultbench/runs)",
    )
    parser.add_argument(
        "--engine", default="local", help=f"where runs train: {', '.join(ENGINES)} (default: local)"
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
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds one diagnosis may take (default: {DEFAULT_TIMEOUT:g})",
    )


def engine_from(args: argparse.Namespace) -> Engine:
    """The engine the arguments ask for."""
    from faultbench.training.engine import make_engine

    if args.address and args.engine != "dask":
        raise FaultbenchError(
            f"--address '{args.address}' needs --engine dask; got --engine {args.engine}"
        )
    return make_engine(args.engine, workers=args.workers, address=args.address)


def store_from(args: argparse.Namespace) -> Store:
    """The store the arguments ask for."""
    from faultbench.storage.store import Store

    return Store(args.store)
