"""The runs dataset: exported from a store, read without faultbench, scored with nothing trained."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from faultbench.cli.main import main as cli
from faultbench.core.errors import FaultbenchError
from faultbench.scoring.evaluate import evaluate
from faultbench.storage.dataset import MANIFEST, RunsDataset
from faultbench.storage.export import export
from faultbench.storage.records import RunRecord, dumps
from faultbench.storage.store import Store

TASK = "diabetes"  # the cheapest runs of the board: its classic grid trains in seconds
SEEDS = 1


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding diabetes' classic grid (one seed), trained once for the module."""
    root = tmp_path_factory.mktemp("trained")
    evaluate("always-healthy", TASK, grid="classic", seeds=SEEDS, store=Store(root, runs=None))
    return root


@pytest.fixture(scope="module")
def dataset(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "runs"
    export(Store(trained, runs=None).records(), out)
    return out


def _records(root: Path) -> dict[str, RunRecord]:
    return {r.key: r for r in Store(root, runs=None).records()}


def test_a_run_reads_back_as_the_record_it_was_exported_from(trained: Path, dataset: Path):
    stored = _records(trained)
    back = RunsDataset(dataset).records()
    assert sorted(r.key for r in back) == sorted(stored)
    for record in back:
        original = stored[record.key]
        # The lite tier keeps the trace as Monitor(every=20) records it, bit for bit.
        lite = replace(original, trace=original.trace.sampled(20) if original.trace else None)
        assert dumps(record.to_dict()) == dumps(lite.to_dict())


def test_the_tables_read_with_pyarrow_alone(trained: Path, dataset: Path):
    runs = pads.dataset(dataset / "runs", format="parquet", partitioning="hive").to_table()
    traces = pads.dataset(dataset / "traces", format="parquet", partitioning="hive").to_table()
    stored = _records(trained)
    assert sorted(runs.column("key").to_pylist()) == sorted(stored)
    assert set(runs.column("task").to_pylist()) == {TASK}
    healthy = runs.filter(pads.field("condition") == "healthy").to_pylist()
    assert len(healthy) == SEEDS and healthy[0]["fault"] == "healthy"
    key = healthy[0]["key"]
    rows = traces.filter((pads.field("key") == key) & (pads.field("series") == "loss"))
    loss = rows.column("values").to_pylist()[0]
    assert np.array_equal(loss, stored[key].trace.loss)
    wait = traces.filter((pads.field("key") == key) & (pads.field("series") == "wait_microseconds"))
    micro = np.asarray(wait.column("values").to_pylist()[0])
    assert np.array_equal(micro / 1e6, stored[key].trace.wait_seconds)
    assert np.array_equal(micro, np.rint(micro))  # whole microseconds
    # Each file is the one its manifest names, by SHA-256.
    manifest = json.loads((dataset / MANIFEST).read_text())
    assert manifest["tier"] == "lite" and manifest["every"] == 20
    assert set(manifest["files"]) == {
        f"{table}/task={TASK}/part-0.parquet" for table in ("runs", "traces")
    }
    assert pq.read_table(dataset / f"runs/task={TASK}/part-0.parquet").num_rows == len(stored)


def test_a_store_standing_on_the_dataset_trains_nothing_and_answers_the_same(
    trained: Path, dataset: Path, tmp_path: Path
):
    empty = Store(tmp_path / "empty", runs=dataset)
    from_data = evaluate("rules", TASK, grid="classic", seeds=SEEDS, store=empty)
    from_store = evaluate(
        "rules", TASK, grid="classic", seeds=SEEDS, store=Store(trained, runs=None)
    )
    assert from_data.trained == 0 and from_store.trained == 0
    assert list(empty.root.glob("*/*/seed-*/*/*.json")) == []  # no run written
    assert [(r.truth, r.predicted) for r in from_data.results] == [
        (r.truth, r.predicted) for r in from_store.results
    ]


def test_export_keeps_unchanged_partitions_byte_for_byte(trained: Path, tmp_path: Path):
    records = Store(trained, runs=None).records()
    first = export(records, tmp_path / "a")
    second = export(reversed(records), tmp_path / "b")
    assert {k: v["sha256"] for k, v in first.files.items()} == {
        k: v["sha256"] for k, v in second.files.items()
    }
    # Exported again from what it holds (a fresh clone's make report), the folder is left
    # as it was, its manifest's date included.
    before = (tmp_path / "a" / MANIFEST).read_bytes()
    again = export(RunsDataset(tmp_path / "a").records(), tmp_path / "a")
    assert again == first and (tmp_path / "a" / MANIFEST).read_bytes() == before


def test_a_changed_file_is_refused_naming_the_runs_it_would_retrain(dataset: Path, tmp_path: Path):
    copy = tmp_path / "runs"
    shutil.copytree(dataset, copy)
    part = copy / f"traces/task={TASK}/part-0.parquet"
    part.write_bytes(part.read_bytes()[:-10])
    with pytest.raises(FaultbenchError, match=rf"runs of task {TASK} would be trained again"):
        RunsDataset(copy)


def test_a_dataset_of_other_training_code_is_refused_by_the_cli(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    copy = tmp_path / "runs"
    shutil.copytree(dataset, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["training_code"] = "0123456789ab"
    (copy / MANIFEST).write_text(json.dumps(manifest))
    assert cli(["runs", "check", "--runs", str(copy)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "made by training code 0123456789ab" in err and "make runs" in err
    args = ["run", "--diagnoser", "rules", "--task", TASK, "--grid", "classic", "--seeds", "1"]
    assert cli([*args, "--runs", str(copy), "--store", str(tmp_path / "s")]) == 2
    assert not (tmp_path / "s").exists()  # refused before any work


def test_the_cli_exports_and_checks(trained: Path, tmp_path: Path, capsys):
    out = tmp_path / "runs"
    argv = ["runs", "export", "--store", str(trained), "--runs", "none", "--out", str(out)]
    assert cli(argv) == 0
    assert f"{len(_records(trained))} runs of 1 tasks (lite tier" in capsys.readouterr().out
    assert cli(["runs", "check", "--runs", str(out)]) == 0
    with pytest.raises(SystemExit) as exited:
        cli(["runs", "export", "--tier", "tiny"])
    assert exited.value.code == 2
    assert "Unknown tier 'tiny'. Valid: full, lite" in capsys.readouterr().err


def test_export_refuses_a_store_with_nothing_for_the_task(trained: Path, tmp_path: Path):
    with pytest.raises(FaultbenchError, match="no run to export for digits"):
        export(Store(trained, runs=None).records(), tmp_path / "runs", tasks=["digits"])
    assert not (tmp_path / "runs").exists()


def test_the_schema_pages_pandas_lines_read_it(trained: Path, dataset: Path):
    import pandas as pd

    runs = pd.read_parquet(dataset / "runs")  # docs/runs.md's lines, as they stand there
    traces = pd.read_parquet(dataset / "traces", filters=[("task", "=", TASK)])
    loss = traces[(traces.series == "loss")].set_index("key")["values"]
    assert set(runs.task.astype(str)) == {TASK} and len(runs) == len(_records(trained))
    assert sorted(loss.index) == sorted(runs.key)


def test_a_fresh_clone_finds_the_answers_exported_beside_the_runs(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from faultbench.diagnosers.rules import RulesDiagnoser
    from faultbench.reporting import resultfile

    results, store = tmp_path / "results", tmp_path / "store"
    shutil.copytree(trained, store)  # the full grid's few runs are trained into this copy
    board = ["--task", TASK, "--seeds", "1", "--fault-seeds", "1", "--healthy-seeds", "2"]
    board += ["--faults", "lr_too_high", "--cases", "none"]  # both grids, both samplings
    made = [*board, "--store", str(store), "--runs", "none", "--results", str(results)]
    assert cli(["score", "--diagnoser", "rules", *made]) == 0
    assert (results / "diagnosers" / "rules.answers.parquet").exists()
    assert cli(["runs", "export", "--store", str(store), "--runs", "none",
                "--out", str(results / "runs")]) == 0  # fmt: skip
    first = resultfile.read(results / "diagnosers" / "rules.json").answers
    assert set(first["every"]) == {1, 20}

    def refuse(self: object, run: object) -> object:
        raise AssertionError("diagnosed a run whose answer ships")

    monkeypatch.setattr(RulesDiagnoser, "diagnose", refuse)
    fresh = [*board, "--store", str(tmp_path / "empty"), "--runs", str(results / "runs")]
    assert cli(["score", "--diagnoser", "rules", *fresh, "--results", str(results)]) == 0
    again = resultfile.read(results / "diagnosers" / "rules.json").answers
    # Every step too: its answers ship, so the lite tier's every-20th trace is never read.
    assert set(again["status"]) == {"ok"} and set(again["every"]) == {1, 20}
    kept = ["key", "every", "predicted", "also", "status", "probe_steps"]
    assert again[kept].equals(first[kept])


def test_a_score_stopped_half_way_keeps_the_answers_it_made(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import pyarrow.parquet as pq

    from faultbench.reporting import submission

    real, calls = submission._evaluate, []

    def stopped_at_the_second(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the session's end, in the middle of the board
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(submission, "_evaluate", stopped_at_the_second)
    results, case = tmp_path / "results", "aihwkit_simple_layer_zero_grad"  # a cheap case
    board = ["--task", TASK, "--seeds", "1", "--grids", "classic", "--cases", case]
    board += ["--store", str(trained), "--runs", "none", "--results", str(results)]
    assert cli(["score", "--diagnoser", "rules", *board]) == 130  # classic, then real bugs
    kept = pq.read_table(results / "diagnosers" / "rules.answers.parquet").to_pandas()
    assert len(kept) == len(_records(trained)) and set(kept["status"]) == {"ok"}
    assert not (results / "diagnosers" / "rules.json").exists()  # no result file yet


def test_the_cli_offers_the_tiers_the_dataset_has():
    from faultbench.cli.commands import runs as command
    from faultbench.storage import dataset

    assert set(command.TIERS) == set(dataset.TIERS)
