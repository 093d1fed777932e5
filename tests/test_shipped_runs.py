"""The shipped runs dataset (results/runs/), read as its users read it: with pyarrow alone.

What docs/runs.md promises of the folder in the repository: every file is the one its
manifest names (SHA-256, rows), the runs table and the traces table join on the run key,
every task of the board (and the real-bug suite) has its partition, and the whole fits the
25 MB the repository gives it. faultbench is imported only for the list of tasks it should
hold, and for results/README.md's lines about the folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from faultbench.tasks.task import task_names

SHIPPED = Path(__file__).resolve().parents[1] / "results" / "runs"
LIMIT_BYTES = 25 * 10**6  # what the repository gives the lite tier


def _manifest() -> dict:
    return json.loads((SHIPPED / "manifest.json").read_text())


def test_every_shipped_file_is_the_one_its_manifest_names_and_fits_the_limit() -> None:
    files = _manifest()["files"]
    on_disk = {p.relative_to(SHIPPED).as_posix() for p in SHIPPED.rglob("*.parquet")}
    assert on_disk == set(files)
    for name, entry in files.items():
        data = (SHIPPED / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
        assert pq.read_metadata(SHIPPED / name).num_rows == entry["rows"], name
    assert sum((SHIPPED / name).stat().st_size for name in files) <= LIMIT_BYTES


def test_the_shipped_runs_cover_every_task_and_each_has_its_loss_curve() -> None:
    manifest = _manifest()
    assert manifest["tier"] == "lite"
    runs = pads.dataset(SHIPPED / "runs", format="parquet", partitioning="hive").to_table(
        columns=["key", "task", "condition", "status"]
    )
    # Every task's grids, and the real-bug suite's faulty forms and twins in a partition of
    # their own.
    assert set(runs.column("task").to_pylist()) == {*task_names(), "realbugs"}
    assert runs.num_rows == sum(
        e["runs"] for name, e in manifest["files"].items() if name.startswith("runs/")
    )
    keys = runs.column("key")
    assert pc.count_distinct(keys).as_py() == runs.num_rows  # one row per run
    assert "healthy" in set(runs.column("condition").to_pylist())
    traces = pads.dataset(SHIPPED / "traces", format="parquet", partitioning="hive")
    loss = traces.to_table(columns=["key"], filter=pads.field("series") == "loss")
    trained = runs.filter(pc.equal(runs.column("status"), "ok")).column("key")
    assert set(trained.to_pylist()) <= set(loss.column("key").to_pylist())


def test_results_readme_says_where_and_when_the_shipped_runs_were_trained(tmp_path: Path) -> None:
    from faultbench.reporting.provenance import dataset_summary, readme

    made = _manifest()["made"]
    lines = readme("faultbench report", [], {}, 0, revision="r", dataset=dataset_summary(SHIPPED))
    assert "### The runs dataset" in lines
    assert f"processor {made['processor']}" in lines and made["when"] in lines
    assert dataset_summary(tmp_path) == {}  # no dataset there: no section
