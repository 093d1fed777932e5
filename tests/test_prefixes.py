"""Every diagnoser scored on runs cut at 10%, 25% and 50% of their steps: what it is handed,
what an instrument's diagnoser answers there, the stored answers kept apart, and the
leaderboard's table and curves of identification, false alarms and the undecided share."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from faultbench.core.errors import FaultbenchError
from faultbench.reporting import prefixes
from faultbench.scoring import board as board_module
from faultbench.scoring.contract import UNDECIDED, Diagnosis
from faultbench.scoring.evaluate import evaluate
from faultbench.scoring.run import Run
from faultbench.storage.store import Store
from faultbench.training.engine import LocalEngine
from faultbench.training.instruments import INSTRUMENTS, Instrument
from faultbench.training.trace import PREFIXES, prefix_step

GRID = {"grid": "full", "seeds": 1, "healthy_seeds": 2, "faults": ["lr_too_high"]}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # probes of tiny models: more threads only wait for each other
    yield
    torch.set_num_threads(before)


class Seen:
    """Answers healthy and keeps what each run it was handed held."""

    name = "seen"
    tuned_on: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.steps: list[tuple[int, int, int, float]] = []

    def diagnose(self, run: Run) -> Diagnosis:
        t = run.trace
        self.steps.append((t.steps, run.config.steps, len(t.eval_steps), float(t.eval_steps.max())))
        return Diagnosis("healthy")


class Steps(Instrument):
    """An instrument that counts the steps it saw: a record of the whole run."""

    name = "test-steps"

    def __init__(self) -> None:
        self.seen = 0

    def after_step(self, *args: object) -> None:
        self.seen += 1

    def finish(self) -> dict[str, object]:
        return {"steps": self.seen}


class Instrumented(Seen):
    """A diagnoser that reads an instrument's record of the whole run."""

    name = "instrumented"
    instrument = Steps.name


@pytest.fixture
def steps_instrument() -> Iterator[str]:
    """``test-steps`` registered for one test (the registry keeps no test entries)."""
    INSTRUMENTS.add(Steps.name, Steps)
    yield Steps.name
    del INSTRUMENTS._entries[Steps.name]


def test_the_board_and_the_trace_cut_at_the_same_shares() -> None:
    assert board_module.PREFIXES == PREFIXES


@pytest.mark.parametrize("prefix", [*PREFIXES, 1.0])
def test_a_diagnoser_is_handed_each_run_as_it_stood_at_the_prefix(
    shared_store_root: Path, pool: LocalEngine, prefix: float
) -> None:
    seen = Seen()
    report = evaluate(
        seen, "digits", **GRID, prefix=prefix, store=shared_store_root, engine=pool, isolate=False
    )
    assert report.prefix == prefix and report.to_dict()["prefix"] == prefix
    assert len(seen.steps) == len(report.results) > 0
    for trace_steps, config_steps, evaluations, last_eval in seen.steps:
        step = prefix_step(600, prefix)  # every digits design trains 600 steps
        assert trace_steps == config_steps == step
        assert last_eval <= step and evaluations == step // 60  # one every 60 steps


def test_a_prefix_of_an_instrumented_run_is_undecided_never_read_whole(
    shared_store_root: Path, steps_instrument: str
) -> None:
    seen = Instrumented()  # its runs trained here: the pool's workers know no test instrument
    report = evaluate(seen, "digits", **GRID, prefix=0.25, store=shared_store_root, isolate=False)
    assert seen.steps == []  # never handed the whole run's instrument record
    assert {r.predicted for r in report.results} == {UNDECIDED}
    assert all("cannot be cut" in r.evidence["not_cut"] for r in report.results)


def test_stored_answers_at_a_prefix_are_kept_apart_from_the_whole_runs(
    shared_store_root: Path, pool: LocalEngine
) -> None:
    for prefix in (0.1, 1.0):
        evaluate("rules-v1", "digits", **GRID, prefix=prefix, store=shared_store_root, engine=pool)
    tables = Store(shared_store_root).root.glob("answers/rules-v1/*/*.parquet")
    kept = {(row["every"], row["prefix"]) for t in tables for row in pq.read_table(t).to_pylist()}
    assert {(20, 0.1), (20, 1.0)} <= kept  # each answer under the share of the run it read
    with pytest.raises(FaultbenchError, match=re.escape("Unknown prefix '0.3'")):
        evaluate("rules-v1", "digits", **GRID, prefix=0.3, store=shared_store_root)


def _row(name: str, prefix: float, truth: str, predicted: str) -> dict[str, object]:
    kind = "healthy" if truth == "healthy" else "known"
    return {
        "diagnoser": name,
        "prefix": prefix,
        "grid": "full",
        "every": 20,
        "truth": truth,
        "kind": kind,
        "predicted": predicted,
        "status": "ok",
        "level": "mild",
        "variant": "",
    }


def test_the_table_gives_each_share_of_the_run_counted_by_hand(tmp_path: Path) -> None:
    rows = [
        _row("a", 0.1, "healthy", "undecided"),
        _row("a", 0.1, "lr_too_high", "undecided"),
        _row("a", 0.1, "healthy", "dead_units"),
        _row("a", 1.0, "healthy", "healthy"),
        _row("a", 1.0, "lr_too_high", "lr_too_high"),
        _row("a", 1.0, "healthy", "healthy"),
        {**_row("a", 1.0, "healthy", "lr_too_high"), "every": 1},  # another sampling: left out
    ]
    found = prefixes.table(pd.DataFrame(rows))
    assert list(found["prefix"]) == [0.1, 1.0] and list(found["runs"]) == [3, 3]
    early, whole = found.iloc[0], found.iloc[1]
    assert early["false alarms"].startswith("0.500 ")  # 1 of 2 healthy: undecided is no alarm
    assert early["identification"].startswith("0.000 ")  # undecided is never right
    assert early["undecided"].startswith("0.667 ")  # 2 of its 3 runs
    assert whole["identification"].startswith("1.000 ") and whole["undecided"].startswith("0.000 ")
    assert "## How early it knows" in prefixes.markdown(found)
    assert prefixes.figure(pd.DataFrame(rows), tmp_path / "p.png").stat().st_size > 0
