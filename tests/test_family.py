"""A task's family of healthy designs: deterministic draws that cover every axis, working
rates from the sweep, verified bases with their redraws counted, and the draw in the key."""

from __future__ import annotations

import hashlib
import itertools
import json
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import faultbench as fb
from faultbench.faults.family import (
    CANONICAL_RATES,
    describe_family,
    draw_design,
    load_rates,
    measured,
    working_rates,
)
from faultbench.faults.fault import Condition
from faultbench.scoring.evaluate import evaluate
from faultbench.storage.bases import healthy_verdict, verified_bases
from faultbench.storage.records import RunSpec
from faultbench.storage.store import Store
from faultbench.tasks.design import LOADERS, WEIGHT_DECAY, Design, Family
from faultbench.tasks.task import TrainDefaults, get_task, task_names
from faultbench.tools.rates import working_rate

DRAWS = 100


def _values(design: Design, axis: str) -> set[object]:
    """The values a drawn design takes on one of its family's axes."""
    net = design.network
    return {
        "optimizers": {design.optimizer},
        "depths": {len(net.widths)},
        "widths": set(net.widths),
        "activations": {net.activation},
        "norms": {net.norm},
        "dropouts": {net.dropout},
        "batch_sizes": {design.batch_size},
        "schedules": {design.schedule},
        "clips": {design.clip},
        "weight_decays": {"on" if design.weight_decay else "off"},
        "inits": {net.init},
        "convolutions": {len(net.channels)},
        "channels": set(net.channels),
        "downsamples": {net.downsample},
        "cells": {net.cell},
        "embeds": {net.embed},
        "states": {net.state},
        "heads": {net.heads},
        "loaders": {design.loader},
    }[axis]


@pytest.mark.parametrize("name", task_names())
def test_a_hundred_draws_are_reproducible_and_cover_every_value_of_every_axis(name: str) -> None:
    task = get_task(name)
    family = task.design_family()
    draws = [draw_design(task, seed) for seed in range(DRAWS)]
    assert draws == [draw_design(task, seed) for seed in range(DRAWS)]  # same seed, same recipe
    for axis, values in family.axes().items():
        seen = set().union(*(_values(d, axis) for d in draws))
        assert seen == set(values), f"{name} {axis}: drew {sorted(map(str, seen))}"
    rates = working_rates(task)
    for d in draws:
        assert d.lr == rates[d.optimizer] and d.attempt == 0
        assert d.weight_decay in (0.0, WEIGHT_DECAY[d.optimizer])
        assert d.network.architecture == task.defaults.architecture


def test_a_draw_is_a_pure_function_of_task_seed_and_attempt() -> None:
    task = get_task("digits")
    rng = np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([zlib.crc32(b"digits"), 7, 2]))
    )
    optimizers = task.design_family().optimizers
    first = optimizers[int(rng.integers(len(optimizers)))]  # the first axis drawn
    design = draw_design(task, 7, attempt=2)
    assert design.optimizer == first and design.attempt == 2
    assert draw_design(task, 7, attempt=3) != design  # the next sub-seed draws anew
    assert Design.from_dict(design.to_dict()) == design


#: sha256 of the designs drawn for seeds 0-19, attempts 0-2, of the tasks that shipped before
#: the loader axis, as the code before it drew them (each design's dict without its rate,
#: which a calibration may move, and without the loader, which did not exist).
BEFORE_LOADERS = "034770275a4acff82351aefc775e30a6c8cb7f8c37e6ca03f0e0b23be0b207e7"
TASKS_BEFORE_LOADERS = ("digits", "synthetic", "shapes", "language", "numbers", "spelling")


def test_the_loader_is_drawn_last_so_every_other_axis_draws_what_it_did() -> None:
    rows = []
    for name in TASKS_BEFORE_LOADERS:
        for seed, attempt in itertools.product(range(20), range(3)):
            design = draw_design(get_task(name), seed, attempt).to_dict()
            del design["loader"], design["lr"]
            rows.append(design)
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
    assert digest == BEFORE_LOADERS


def test_a_design_written_by_hand_has_ready_tensors_and_a_drawn_one_any_loader() -> None:
    digits = get_task("digits")
    reference = digits.reference_design()
    assert reference.loader == "tensors"
    workers = reference.replace(loader="workers")
    assert Design.from_dict(workers.to_dict()) == workers and workers.digest != reference.digest
    old = reference.to_dict()
    del old["loader"]  # a record of the code before the axis
    assert Design.from_dict(old) == reference
    drawn = [draw_design(digits, seed) for seed in range(40)]
    assert {d.loader for d in drawn} == set(LOADERS)
    assert all(d.axes()["loader"] == d.loader for d in drawn)
    assert all(("loader" in d.describe()) == (d.loader != "tensors") for d in drawn)


def test_the_drawn_design_is_part_of_the_run_key() -> None:
    task = get_task("digits")
    specs = [
        RunSpec(task.name, task.fingerprint, Condition(), 0, design)
        for design in (None, draw_design(task, 0), draw_design(task, 0, attempt=1))
    ]
    assert len({spec.key() for spec in specs}) == 3
    assert len({spec.folder for spec in specs}) == 3


@pytest.mark.parametrize("name", task_names())
def test_every_optimizer_of_a_shipped_task_has_a_measured_working_rate(name: str) -> None:
    task = get_task(name)
    assert measured(task)
    points = [p for p in load_rates() if p.task == name]
    for optimizer in task.design_family().optimizers:
        sweep = {p.lr: p.val_acc for p in points if p.optimizer == optimizer}
        chosen = [p.lr for p in points if p.optimizer == optimizer and p.working]
        assert len(sweep) >= 5 and chosen == [working_rate(sweep)]  # the rule, re-applied
        assert working_rates(task)[optimizer] == chosen[0]


def test_working_rate_is_the_lowest_rate_within_two_points_of_the_best() -> None:
    assert working_rate({1e-4: 0.5, 1e-3: 0.95, 1e-2: 0.96, 1e-1: 0.2}) == 1e-3
    assert working_rate({1e-4: 0.5, 1e-3: 0.90, 1e-2: 0.96, 1e-1: 0.95}) == 1e-2


def test_a_users_task_gets_the_canonical_rates_and_its_own_for_its_optimizer() -> None:
    from sklearn.datasets import load_iris

    iris = load_iris()
    task = fb.Task.from_arrays("iris-fam", iris.data, iris.target, defaults=TrainDefaults(lr=3e-3))
    assert not measured(task)
    assert working_rates(task) == {**CANONICAL_RATES, "adam": 3e-3}
    shown = dict(describe_family(task.design_family()))
    assert shown["optimizers"].startswith("adam, adamw, sgd, rmsprop")


def _tiny_task(family: Family | None = None, defaults: TrainDefaults | None = None) -> fb.Task:
    from sklearn.datasets import load_iris

    iris = load_iris()
    defaults = defaults or TrainDefaults(steps=60, hidden=16)
    return fb.Task.from_arrays(
        "iris-tiny", iris.data, iris.target, defaults=defaults, family=family
    )


def test_a_draw_that_does_not_train_healthy_is_redrawn_and_counted(tmp_path: Path) -> None:
    # The task's own optimizer, SGD, at a rate of nothing: every SGD draw fails to train.
    family = replace(Family("mlp"), optimizers=("adam", "sgd"), depths=(1,), widths=(16,))
    task = _tiny_task(family, TrainDefaults(steps=60, hidden=16, optimizer="sgd", lr=1e-12))
    first = [draw_design(task, s) for s in range(6)]
    assert any(d.optimizer == "sgd" for d in first) and any(d.optimizer == "adam" for d in first)
    bases = verified_bases(task, range(6), store=Store(tmp_path))
    for seed, base in bases.items():
        assert base.design.optimizer == "adam"  # every kept base trains
        assert base.redraws == base.design.attempt  # attempts 0 .. redraws-1 were rejected
        if first[seed].optimizer == "sgd":
            assert base.redraws > 0 and "did not fall" in base.rejected[0], base.rejected


def test_the_report_counts_redraws_and_holds_many_healthy_runs(tmp_path: Path) -> None:
    task = _tiny_task()
    report = evaluate(
        "always-healthy",
        task,
        seeds=1,
        healthy_seeds=12,
        faults=["lr_too_high"],
        store=Store(tmp_path),
        progress=False,
    )
    healthy = [r for r in report.results if r.condition == "healthy"]
    assert len(healthy) == 12 and all(r.drawn for r in healthy)
    out = report.to_dict()
    assert out["bases"]["drawn"] == 12 and out["bases"]["redraws"] == report.redraws >= 0
    assert out["scores"]["false_alarms"]["n"] == 12
    assert any("canonical, not measured" in note for note in report.notes)


def test_a_healthy_verdict_needs_a_falling_loss_and_the_reference_accuracy(tmp_path: Path) -> None:
    task = _tiny_task()
    store = Store(tmp_path)
    base = verified_bases(task, [0], store=store)[0]
    record = store.load(RunSpec(task.name, task.fingerprint, Condition(), 0, base.design))
    assert record is not None and healthy_verdict(record, 0.5) == ""
    assert "validation accuracy" in healthy_verdict(record, 2.0)  # no run reaches 0.9 x 2
