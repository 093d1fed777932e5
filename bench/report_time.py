"""What a cold ``make report`` costs, from the seconds the store measured as it ran.

    .venv/bin/python bench/report_time.py [--store DIR] [--workers 2]

A cold ``make report`` on 2 cores trains every calibration run and every run of
both grids, then diagnoses each with every shipped diagnoser. Timing it whole
takes longer than one sitting, but every part of it was measured when it ran:
each run record holds its training seconds, and each stored diagnosis its
seconds. This sums them over the records of the current code (calibration
seeds apart from the scored ones) and the diagnoses of the current diagnosis
code, and estimates the cold wall time as (training + diagnosing) / workers
(the report trains and then diagnoses on its engine's workers; the seconds
were measured with ``workers`` runs side by side). It is an estimate from
measurements, not a timing: runs in the store that ``make report`` does not use
(a test's, an earlier command's) count too, and process start-up, reading and
writing are left out.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from faultbench.scoring.cache import diagnosis_code
from faultbench.storage.records import RunSpec
from faultbench.storage.store import default_root
from faultbench.tools.calibrate import SEEDS as CALIBRATION_SEEDS


def training_seconds(root: Path) -> dict[str, Counter[str]]:
    """Per part ("calibration", "grids"): training seconds and runs, per task, of the
    records whose key is the current code's."""
    parts: dict[str, Counter[str]] = {"calibration": Counter(), "grids": Counter()}
    runs: dict[str, Counter[str]] = {"calibration": Counter(), "grids": Counter()}
    for path in root.glob("*/*/seed-*/*/*.json"):
        data = json.loads(path.read_text())
        spec = RunSpec.from_dict(data["spec"])
        if path.parent.name != spec.key():  # a stale code version's record
            continue
        part = "calibration" if spec.seed in CALIBRATION_SEEDS else "grids"
        parts[part][spec.task] += float(data["seconds"])
        runs[part][spec.task] += 1
    return {**parts, **{f"{k} runs": v for k, v in runs.items()}}


def diagnosis_seconds(root: Path) -> tuple[Counter[str], Counter[str]]:
    """Seconds and answers per diagnoser, of the answers stored for the current code."""
    seconds: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    for path in root.glob(f"*/*/seed-*/*/diagnoses/*/{diagnosis_code()}-*.json"):
        diagnoser = path.parent.name
        seconds[diagnoser] += float(json.loads(path.read_text())["seconds"])
        answers[diagnoser] += 1
    return seconds, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=default_root())
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    train = training_seconds(args.store)
    diag, answers = diagnosis_seconds(args.store)
    for part in ("calibration", "grids"):
        total = sum(train[part].values())
        per_task = ", ".join(
            f"{t} {s / 60:.1f} min ({train[part + ' runs'][t]} runs)"
            for t, s in sorted(train[part].items())
        )
        print(f"training, {part}: {total / 60:.1f} min of run time [{per_task}]")
    print(
        "diagnosing: "
        + ", ".join(f"{d} {s / 60:.1f} min ({answers[d]})" for d, s in diag.most_common())
    )
    train_wall = sum(sum(train[p].values()) for p in ("calibration", "grids")) / args.workers
    diag_wall = sum(diag.values()) / args.workers
    calibration_wall = sum(train["calibration"].values()) / args.workers
    print(
        f"estimated cold make report on {args.workers} workers: "
        f"{(train_wall + diag_wall) / 60:.1f} min (training {train_wall / 60:.1f} min, of which "
        f"calibration {calibration_wall / 60:.1f}; diagnosing {diag_wall / 60:.1f} min)"
    )


if __name__ == "__main__":
    main()
