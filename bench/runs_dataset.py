"""What reading the runs dataset costs: every run of a dataset loaded as a RunRecord.

Opens the dataset (every file's SHA-256 checked), then reads every run back as the store
hands it to a diagnoser, in a fresh process; prints the wall seconds of each part and the
process's peak resident memory. The issue's aim for the shipped lite tier: 5 s and 1 GB on
2 cores.

Without a dataset at hand (before results/runs/ ships), ``--replicate N`` builds one from a
store's runs, each run written N times under other keys, so a few trained runs stand for a
board of that size (the cost is per row and per run, not per distinct value).

    python bench/runs_dataset.py [--runs results/runs]
    python bench/runs_dataset.py --store DIR --replicate 60 --out /tmp/bigruns
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import time
from dataclasses import replace
from pathlib import Path


def _replicated(store: Path, times: int, out: Path) -> Path:
    from faultbench.storage.export import export
    from faultbench.storage.store import Store

    records = Store(store, runs=None).records()
    copies = [
        replace(r, key=hashlib.sha256(f"{r.key}{i}".encode()).hexdigest()[:20])
        for i in range(times)
        for r in records
    ]
    export(copies, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("results/runs"))
    parser.add_argument("--store", type=Path, help="build a replicated dataset from this store")
    parser.add_argument("--replicate", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("/tmp/faultbench-bench-runs"))
    args = parser.parse_args()
    folder = _replicated(args.store, args.replicate, args.out) if args.store else args.runs

    from faultbench.storage.dataset import RunsDataset

    start = time.perf_counter()
    dataset = RunsDataset(folder)
    opened = time.perf_counter()
    records = dataset.records()
    read = time.perf_counter()
    size = sum((folder / name).stat().st_size for name in dataset.manifest.files)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(
        f"{folder}: {len(records)} runs, {size / 1e6:.1f} MB on disk; opened (hashes checked) "
        f"in {opened - start:.2f} s, every run read back in {read - opened:.2f} s; "
        f"peak memory {peak:.0f} MiB"
    )


if __name__ == "__main__":
    main()
