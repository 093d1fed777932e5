"""Cached runs: a rerun trains nothing, a code change retrains visibly, rescoring is free."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import faultbench.storage.records
from conftest import DIGITS_CONDITIONS
from faultbench.faults.fault import FAULTS, Fault, canonical_conditions
from faultbench.scoring.diagnosis import Diagnosis
from faultbench.scoring.evaluate import evaluate
from faultbench.scoring.run import Run
from faultbench.storage.store import Store


class RefusingEngine:
    """An engine that fails the test if anything is handed to it for training."""

    name = "refusing"

    def map_unordered(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        items = list(items)
        assert not items, f"asked to train {len(items)} runs that should be stored"
        yield from ()

    def close(self) -> None:
        pass


class CountingDiagnoser:
    """A diagnoser the store has never seen; it answers from the trace alone."""

    name = "counting"
    tuned_on: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def diagnose(self, run: Run) -> Diagnosis:
        self.seen.append((run.task, run.seed))
        label = "healthy" if run.trace.val_acc[-1] > 0.9 else "too_small_model"
        return Diagnosis(label)


@pytest.mark.parametrize("diagnoser", ["always-healthy", "random"])
def test_rerun_of_a_stored_grid_trains_nothing(
    digits_grid: dict, shared_store_root: Path, diagnoser: str
) -> None:
    report = evaluate(
        diagnoser,
        "digits",
        seeds=3,
        grid="classic",
        store=Store(shared_store_root),
        engine=RefusingEngine(),
    )
    assert report.trained == 0
    assert report.total == len(DIGITS_CONDITIONS) * 3 == len(digits_grid)
    assert report.failures == {}


def test_new_diagnoser_on_stored_runs_trains_nothing_and_sees_every_run(
    digits_grid: dict, shared_store_root: Path
) -> None:
    diagnoser = CountingDiagnoser()
    report = evaluate(
        diagnoser,
        "digits",
        seeds=3,
        grid="classic",
        store=Store(shared_store_root),
        engine=RefusingEngine(),
        isolate=False,  # in this process, so that what it saw can be read back here
    )
    assert report.trained == 0
    assert sorted(diagnoser.seen) == sorted(("digits", seed) for _, seed in digits_grid)
    assert report.mean_probe_steps == 0  # it asked for no probe, so nothing was trained
    # The stored traces are the fixture's: width-2 runs are the ones below 0.9.
    small = [r for r in report.results if r.condition == "too_small_model"]
    assert all(r.predicted == "too_small_model" for r in small)


def test_code_version_change_retrains_and_notes_the_stale_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path)
    healthy = canonical_conditions(["healthy"])
    first = evaluate("always-healthy", "digits", seeds=1, conditions=healthy, store=store)
    assert (first.trained, first.notes) == (1, ())
    monkeypatch.setattr(faultbench.storage.records, "code_version", lambda: "changed-loop")
    second = evaluate(
        "always-healthy", "digits", seeds=1, conditions=healthy, store=Store(tmp_path)
    )
    assert second.trained == 1
    assert any("healthy/seed-0" in n and "other code" in n for n in second.notes), second.notes
    keys = {r.key for r in Store(tmp_path).records()}
    assert len(keys) == 2  # the old version's record is kept beside the new one, not reused
    again = evaluate("always-healthy", "digits", seeds=1, conditions=healthy, store=Store(tmp_path))
    assert again.trained == 0


def test_fault_source_change_retrains_only_the_runs_it_affects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conditions = canonical_conditions(["healthy", "huge_inputs"])
    first = evaluate(
        "always-healthy", "digits", seeds=1, conditions=conditions, store=Store(tmp_path)
    )
    assert first.trained == 2
    original = Fault.source_hash.fget
    assert original is not None
    edited = property(lambda f: "edited" if f.name == "huge_inputs" else original(f))
    monkeypatch.setattr(Fault, "source_hash", edited)
    assert FAULTS.get("huge_inputs").source_hash == "edited"
    # unremembered, as in a new process (the key remembers each condition's hash)
    monkeypatch.setattr(faultbench.storage.records, "_faults_hash", lambda c: c.source_hash())
    second = evaluate(
        "always-healthy", "digits", seeds=1, conditions=conditions, store=Store(tmp_path)
    )
    assert second.trained == 1
    assert [n for n in second.notes if "huge_inputs" in n], second.notes
    assert not [n for n in second.notes if "/healthy/" in n]
