"""The wait shares of a runs dataset's healthy drawn runs, per task: docs/faults.md's table.

A wait share is wall-clock time measured once, when the run trained, and stored in the
dataset (wait / (wait + compute) over the run's recorded steps); reading it from the
dataset gives the same table on any machine. The full tier (results/runs-full/, every
step) is the exact share; the lite tier's is over every 20th step.

    python bench/wait_shares.py [DATASET]   # default: results/runs-full, else results/runs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

LOADERS = ("tensors", "dataloader", "dataset", "workers")
HEALTHY_SEEDS = 50  # faultbench.scoring.plan.HEALTHY_SEEDS (this script reads the data alone)


def _dataset(argv: list[str]) -> Path:
    if argv:
        return Path(argv[0])
    full = Path("results/runs-full")
    return full if (full / "manifest.json").exists() else Path("results/runs")


def wait_shares(folder: Path) -> pd.DataFrame:
    """One row per healthy drawn run of the board's grids: task, seed, loader, share."""
    columns = ["key", "task", "suite", "fault", "seed", "design", "status"]
    runs = pd.read_parquet(folder / "runs", columns=columns)
    healthy = runs[(runs.suite == "grid") & (runs.fault == "healthy") & (runs.status == "ok")]
    attempt = healthy.design.map(lambda d: json.loads(d).get("attempt", -1) if d else -1)
    healthy = healthy.assign(attempt=attempt)
    # The board's healthy drawn runs are seeds 0..HEALTHY_SEEDS-1 (learned diagnosers train
    # on seeds of their own), each the seed's last draw: a seed draws again only when its
    # earlier draw failed the healthy bar, and the dataset keeps that draw too.
    healthy = healthy[(healthy.attempt >= 0) & (healthy.seed < HEALTHY_SEEDS)]
    last = healthy.groupby(["task", "seed"]).attempt.transform("max")
    healthy = healthy[healthy.attempt == last]
    traces = pd.read_parquet(
        folder / "traces",
        columns=["key", "series", "values"],
        filters=[("series", "in", ["wait_microseconds", "compute_microseconds"])],
    )
    series = traces[traces.key.isin(set(healthy.key))].pivot(
        index="key", columns="series", values="values"
    )
    wait = series["wait_microseconds"].map(lambda v: float(np.sum(v)))
    compute = series["compute_microseconds"].map(lambda v: float(np.sum(v)))
    shares = (wait / (wait + compute)).rename("share")
    out = healthy.set_index("key").join(shares, how="inner")
    out["loader"] = out.design.map(lambda d: json.loads(d).get("loader", "?"))
    return out.reset_index()[["task", "seed", "loader", "share"]]


def table(shares: pd.DataFrame) -> str:
    """docs/faults.md's markdown table (p95: numpy's linear interpolation)."""
    lines = [
        "| task | healthy drawn runs (seeds) | median | p95 | largest | largest per loader "
        "(runs): " + " / ".join(LOADERS) + " |",
        "|---|---|---|---|---|---|",
    ]
    for task, rows in shares.groupby("task", sort=True):
        per = []
        for loader in LOADERS:
            mine = rows[rows.loader == loader]
            per.append(f"{mine.share.max():.3f} ({len(mine)})" if len(mine) else "-")
        seeds = f"{rows.seed.min()}-{rows.seed.max()}"
        lines.append(
            f"| {task} | {len(rows)} ({seeds}) | {rows.share.median():.3f} | "
            f"{np.percentile(rows.share, 95):.3f} | {rows.share.max():.3f} | {' / '.join(per)} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    folder = _dataset(argv)
    shares = wait_shares(folder)
    print(f"{folder}: {len(shares)} healthy drawn runs")
    print(table(shares))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
