"""``faultbench new-diagnoser NAME``: write a working diagnoser package to start from."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

NAME = "new-diagnoser"
HELP = "write a diagnoser package skeleton (class, test, entry point) that faultbench accepts"

#: The files of the skeleton, by path ({package} and {name} filled in).
FILES = {
    "pyproject.toml": """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"
description = "A training-failure diagnoser for faultbench"
requires-python = ">=3.11"
dependencies = ["faultbench"]

# `faultbench list` and `faultbench score --diagnoser {name}` find it once installed
# (pip install -e .); uninstalled, it is `--diagnoser {package}.diagnoser:{cls}`.
[project.entry-points."faultbench.diagnosers"]
{name} = "{package}.diagnoser:{cls}"

[tool.setuptools]
packages = ["{package}"]
""",
    "{package}/__init__.py": '''"""The {name} diagnoser for faultbench."""

from {package}.diagnoser import {cls}

__all__ = ["{cls}"]
''',
    "{package}/diagnoser.py": '''"""{cls}: names what is wrong with a training run from its trace.

The contract (every attribute faultbench reads, with its default):
``faultbench.scoring.contract``. Check it with ``faultbench check {package}.diagnoser:{cls}``;
score it with ``faultbench score --diagnoser {package}.diagnoser:{cls}``.
"""

from __future__ import annotations

import math

from faultbench import Diagnosis


class {cls}:
    """A first rule to replace with your own: a loss that stops being finite or that
    ends above where it started is a learning rate too high; anything else is healthy."""

    name = "{name}"
    tuned_on: frozenset[str] = frozenset()  # the tasks you looked at while writing it
    probes = False  # it reads the trace alone (True if it trains through run.probe)

    def diagnose(self, run):  # type: ignore[no-untyped-def]
        loss = [float(v) for v in run.trace.loss]
        if not loss:
            return Diagnosis("unknown")
        finite = [v for v in loss if math.isfinite(v)]
        tenth = max(1, len(finite) // 10)
        start, end = finite[:tenth], finite[-tenth:]
        if len(finite) < len(loss) or (start and sum(end) / len(end) > sum(start) / len(start)):
            return Diagnosis("lr_too_high", evidence={{"finite_steps": len(finite)}})
        return Diagnosis("healthy", evidence={{"finite_steps": len(finite)}})
''',
    "tests/test_{package}.py": '''"""{cls} keeps faultbench's contract: faultbench check passes."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_faultbench_check_passes() -> None:
    found = subprocess.run(
        [sys.executable, "-m", "faultbench.cli.main", "check", "{package}.diagnoser:{cls}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 0, found.stdout + found.stderr
''',
    "README.md": """# {name}

A diagnoser for faultbench, made by `faultbench new-diagnoser {name}`.

    faultbench check {package}.diagnoser:{cls}      # the contract and the conformance checks
    faultbench score --diagnoser {package}.diagnoser:{cls}   # results/diagnosers/{name}.*
    faultbench leaderboard                          # its row beside the others

Run them from this folder (or `pip install -e .` and use the name `{name}`).
""",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``new-diagnoser``."""
    parser.add_argument("name", help="the diagnoser's name: letters, digits, '-' and '_'")
    parser.add_argument(
        "--dir", default=".", help="where the package folder NAME/ is written (default: .)"
    )


def main(args: argparse.Namespace) -> int:
    """Write the skeleton; refuse a bad name or an existing folder (exit 2)."""
    from faultbench.core.errors import FaultbenchError

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", args.name):
        raise FaultbenchError(
            f"diagnoser name '{args.name}': expected a letter, then letters, digits, '-' or "
            "'_' (it names a Python package and a result file)"
        )
    root = Path(args.dir) / args.name
    if root.exists():
        raise FaultbenchError(f"'{root}' exists; expected a new folder (choose another --dir)")
    package = args.name.replace("-", "_").lower()
    cls = "".join(part.capitalize() for part in re.split(r"[-_]", args.name)) + "Diagnoser"
    for path, text in FILES.items():
        target = root / path.format(package=package)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text.format(name=args.name, package=package, cls=cls))
    print(
        f"wrote {root}/ ({len(FILES)} files); from there: faultbench check "
        f"{package}.diagnoser:{cls}, then faultbench score --diagnoser {package}.diagnoser:{cls}"
    )
    return 0
