"""The ``faultbench`` command line: one sub-command per module in ``faultbench.cli.commands``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from faultbench.core import kernels
from faultbench.core.errors import FaultbenchError

#: Listed first in ``--help``; every other module of ``faultbench.cli.commands``
#: that defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
#: ``main(args) -> int`` follows in alphabetical order.
FIRST = ("run", "list")


def _command_modules() -> list[str]:
    import faultbench.cli.commands as package

    found = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
    return [*FIRST, *(name for name in found if name not in FIRST)]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage dump), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    parser = _Parser(
        prog="faultbench",
        description="Score training-failure diagnosers on runs broken on purpose.",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    for module_name in _command_modules():
        module = importlib.import_module(f"faultbench.cli.commands.{module_name}")
        if not hasattr(module, "NAME"):
            continue  # a helper module such as ``common``
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(handler=module.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (2 for bad input)."""
    kernels.pin()  # before any verb imports torch: every run it trains is the same bits anywhere
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except FaultbenchError as exc:
        print(f"faultbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # workers are stopped on the way out; finished runs are stored
        print("faultbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
