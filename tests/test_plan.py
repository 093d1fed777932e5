"""The full grid's plan on drawn bases: healthy on every base, each fault on the first bases
it applies to (the others passed over with the reason), and every variant it scores visible
on most drawn bases at its severe level, on every shipped task.

Visibility on every task is read from the calibration (``faultbench calibrate`` trains each
variant's severities, and each fixed variant, on up to three drawn bases of seeds no grid
scores, and the levels file records the share of them it showed on, with the code it was
measured on; a variant the task's designs mask is recorded ``hidden`` and left out of the
grid); on digits it is also trained here, on the grid's own bases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from faultbench.faults.fault import FAULTS, HEALTHY
from faultbench.faults.grid import grid_points
from faultbench.faults.levels import FIXED, HIDDEN, hidden_on, load_levels
from faultbench.faults.recipe import base_setup
from faultbench.scoring.manifest import manifestation
from faultbench.scoring.plan import Plan, plan
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task, task_names
from faultbench.tools.calibrate import fixed_variants, knob_variants, measured_on
from faultbench.training.engine import SerialEngine

BASES = 3  # drawn bases each severe variant runs on
HEALTHY_BASES = 10  # drawn healthy runs its visibility is tested against
MOST = 2 / 3  # "most" of the bases


@pytest.fixture(scope="module")
def digits_severe(shared_store_root: Path, trainer: SerialEngine) -> tuple[Plan, dict]:
    """Every known variant of digits at its severe level on its first bases, and 10 healthy."""
    task = get_task("digits")
    store = Store(shared_store_root)
    known = FAULTS.names()
    kept = plan(
        task,
        "full",
        seeds=BASES,
        healthy_seeds=HEALTHY_BASES,
        faults=known,
        levels=["severe", "fixed", "canonical"],  # canonical: a knob with no level on the task
        store=store,
        engine=trainer,
        progress=False,
    )
    records = {
        spec: record
        for spec, record, _ in ensure_records(
            kept.specs, task, store=store, engine=trainer, progress=False, copy=False
        )
    }
    return kept, records


@pytest.mark.parametrize("name", task_names())
def test_every_variant_of_the_full_grid_shows_on_most_calibration_bases(name: str) -> None:
    # Each known variant that applies to the task has, measured on this code, either its
    # severe (or fixed) row visible on most of the bases it was swept on, or one hidden
    # row; the full grid scores the first and leaves out exactly the second.
    task = get_task(name)
    levels = [lv for lv in load_levels() if lv.task == name]
    assert all(lv.code == measured_on(task, lv.variant) for lv in levels), "make calibrate"
    top = {lv.variant: lv for lv in levels if lv.level in ("severe", FIXED)}
    hidden = {lv.variant: lv for lv in levels if lv.level == HIDDEN}
    for ident in [*knob_variants(task), *fixed_variants(task)]:
        assert (ident in top) != (ident in hidden), f"{name} {ident}: one verdict, measured"
        if ident in top:
            seen = top[ident].visible_share
            assert seen >= MOST, f"{name} {ident}: visible on {seen:.0%} of its bases"
            assert 1 <= len(top[ident].seeds.split()) <= BASES, top[ident]
        else:
            assert hidden[ident].visible_share < MOST, hidden[ident]
    in_grid = {p.variant for p in grid_points(task, "full") if p.variant}
    known = set(knob_variants(task)) | set(fixed_variants(task))
    assert known & in_grid == known - set(hidden), name
    assert set(hidden_on(name)) == set(hidden)


@pytest.mark.slow
def test_every_digits_variant_manifests_on_most_grid_bases_at_its_severe_level(
    digits_severe: tuple[Plan, dict],
) -> None:
    kept, records = digits_severe
    healthy = [
        (records[spec].trace, records[spec].config)
        for point, spec in kept.runs
        if point.condition.name == HEALTHY
    ]
    assert len(healthy) == HEALTHY_BASES
    shown: dict[str, list[bool]] = {}
    for point, spec in kept.runs:
        if point.condition.name == HEALTHY:
            continue
        record = records[spec]
        visible = not record.ok or bool(manifestation(record.trace, record.config, healthy).visible)
        shown.setdefault(point.variant, []).append(visible)
    known = set(knob_variants(kept.task)) | set(fixed_variants(kept.task))
    assert set(shown) == known - set(hidden_on("digits"))
    for variant, seen in shown.items():
        assert np.mean(seen) >= MOST, f"digits {variant}: visible on {seen}"
    for passed in kept.passed_over.values():  # nothing skipped silently: each with its reason
        assert all(why.startswith("fault variant '") for _, why in passed), passed


def test_a_fault_runs_on_the_first_bases_it_applies_to_and_says_why_it_skipped_others(
    digits_severe: tuple[Plan, dict],
) -> None:
    task = get_task("digits")
    kept, _ = digits_severe
    healthy_seeds = [s.seed for p, s in kept.runs if p.condition.name == HEALTHY]
    assert healthy_seeds == list(range(HEALTHY_BASES))
    for _, spec in kept.runs:
        assert spec.design == kept.bases[spec.seed].design  # every run on its seed's base
    for point in {p for p, _ in kept.runs if p.variant}:
        seeds = [s.seed for p, s in kept.runs if p == point]
        why = {
            seed: point.condition.why_not(base_setup(task, seed, kept.bases[seed].design))
            for seed in range(HEALTHY_BASES)
        }
        expected = [seed for seed in range(HEALTHY_BASES) if not why[seed]][:BASES]
        assert seeds == expected, point.variant
        limit = expected[-1] if len(expected) == BASES else HEALTHY_BASES  # bases looked at
        skipped = {seed: reason for seed, reason in why.items() if reason and seed < limit}
        assert dict(kept.passed_over.get(point.variant, ())) == skipped, point.variant
