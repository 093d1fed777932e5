"""Time a cold ``make report`` for the reference diagnosers, then the rest of it.

Issue 19's goal is the cold report of the benchmark it built: calibrating the
severity levels, training the full and classic grids, and scoring the
diagnosers it ships (:data:`OWN_DIAGNOSERS`: the reference rules and learned
diagnoser and the baselines) within 30 minutes on 2 cores. The published
methods' ports came later and probe each run again; this script times them
apart, on the same store, so both figures come from one cold start:

1. ``faultbench calibrate`` then ``faultbench report`` with only
   :data:`OWN_DIAGNOSERS` (results to a scratch folder), on an empty store;
2. ``make report`` on that store: it trains nothing new, and diagnoses and
   scores every other registered diagnoser into results/.

The sum of the two is a little above a cold ``make report``'s time (the venv
aside): the second step reads back the records the first trained, and calibrates
again from them, under a minute in all.
Run it in a fresh clone with the venv built (``make .venv/.installed``); each
figure is wall-clock time, so measure on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OWN_DIAGNOSERS = ("rules", "rules-v1", "learned", "random", "always-healthy")
REPORT_TIMEOUT = "600"  # the Makefile's: a diagnosis of a loaded machine is not cut short


def timed(label: str, argv: list[str], env: dict[str, str] | None = None) -> float:
    """Run ``argv`` (output passed through) and return its wall time in seconds."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env)
    seconds = time.perf_counter() - start
    print(f"{label}: {seconds / 60:.1f} min", file=sys.stderr, flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="an empty or new folder")
    parser.add_argument("--own-only", action="store_true", help="skip step 2")
    args = parser.parse_args()
    if args.store.exists() and any(args.store.iterdir()):
        parser.error(f"--store {args.store}: expected an empty or new folder (a cold start)")
    faultbench = str(Path(sys.executable).with_name("faultbench"))
    store = ["--store", str(args.store)]
    picks = [arg for name in OWN_DIAGNOSERS for arg in ("--diagnoser", name)]
    with tempfile.TemporaryDirectory() as scratch:
        calibrate = timed("calibrate", [faultbench, "calibrate", *store])
        own = timed(
            "report, own diagnosers",
            [faultbench, "report", *store, *picks, "--out", scratch, "--timeout", REPORT_TIMEOUT],
        )
    print(f"cold, own diagnosers: {(calibrate + own) / 60:.1f} min", flush=True)
    if args.own_only:
        return
    rest = timed(
        "make report, the rest",
        ["make", "report"],
        env={**os.environ, "FAULTBENCH_STORE": str(args.store.resolve())},
    )
    print(f"cold make report (sum of both steps): {(calibrate + own + rest) / 60:.1f} min")


if __name__ == "__main__":
    main()
