"""The starved loader: each step waits its multiple of the run's own compute, so a run's
wait share is ``m / (1 + m)`` as the Monitor measures it, on a quiet or a busy machine,
and hands over the same batches as ever; a healthy run's loader, whichever the design
draws, keeps it well below data-bound, and one worker handing each batch over does not."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from faultbench.faults.batches import SHARD_BATCHES
from faultbench.faults.fault import base_setup, condition
from faultbench.faults.loading import CALIBRATION_STEPS, LEAST_WAITING, MOST_WAITING
from faultbench.faults.recipe import Batch, Recipe
from faultbench.storage.bases import DATA_BOUND, data_bound_verdict
from faultbench.tasks.design import LOADERS
from faultbench.tasks.task import get_task
from faultbench.training.loop import train
from faultbench.training.trace import Trace

VARIANTS = ("starved_loader.pause", "starved_loader.slow_dataset")
MULTIPLES = (LEAST_WAITING, 1.0, MOST_WAITING)  # both ends of the knob and the middle
TOLERANCE = 0.10  # relative to the target share
# relative to the median wait, where the loader's own cost rules: tens of microseconds a
# batch, which a busy 2-core machine moves by more than 10% (CI: -12% at 61 us)
WAIT_TOLERANCE = 0.25
ROOM = 0.8  # a loader costing less than this share of the wait asked for can make up for delays


def _digits() -> Recipe:
    return base_setup(get_task("digits"), 0)


# -- the wait follows the loop's compute ----------------------------------------------------


def _waits(ident: str, severity: float, computes: list[float]) -> np.ndarray:
    """Seconds each ``next()`` of the variant's loader takes, in a loop whose steps
    compute for ``computes[i]`` seconds up to their update, then spend twice as long
    past it (as a Monitor's recording and the loop's evaluations do), all of it slept:
    as long on a busy machine."""
    recipe = condition((ident, severity)).apply(_digits())
    batches = recipe.loader(recipe)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    waits = []
    for step, compute in enumerate(computes, 1):
        start = time.perf_counter()
        next(batches)
        waits.append(time.perf_counter() - start)
        time.sleep(compute)
        recipe.update(model, optimizer, step)
        time.sleep(2 * compute)
    return np.array(waits)


# (variant, most it may wait over 3x the compute). A pause ends on time on a busy machine
# too; a slow Dataset's work is CPU work, which a machine busy with other processes
# stretches (on a 2-core host at load 15: up to about 7x).
@pytest.mark.parametrize(("ident", "most"), [(VARIANTS[0], 4.5), (VARIANTS[1], 9)])
def test_the_wait_is_a_multiple_of_the_compute_up_to_the_update(ident: str, most: float) -> None:
    # A fast machine's step, then one three times slower from step 41 (a machine that
    # got busy): the wait follows within the window of 20 steps. What the loop does
    # after the update is no compute of the step's.
    fast = 0.002
    waits = _waits(ident, 3.0, [fast] * 40 + [3 * fast] * 40)
    assert np.median(waits[:20]) < fast  # timed, not starved: what the loader costs itself
    for compute, after in ((fast, waits[25:40]), (3 * fast, waits[65:])):
        ratio = np.median(after) / compute
        assert 2.7 < ratio < most, (compute, ratio)


# -- the run's wait share, as the Monitor measures it ---------------------------------------


def _spinner() -> subprocess.Popen[bytes]:
    """A process keeping one core busy until killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _off(trace: Trace, multiple: float) -> str:
    """How ``trace`` missed its share of each step ("" when it did not).

    The share is ``m / (1 + m)`` as the Monitor measures it (wait / (wait + compute),
    summed over the run), within TOLERANCE. Unless the loader costs nearly as much by
    itself as the wait asked for (a torch DataLoader's 0.1 ms a batch against 0.2x a
    0.5 ms digits step): then a fetch that a busy machine stretches cannot be made up
    for by a shorter one, and the run's share varies as much as the loader's own cost
    does (0.13 to 0.20 for the same run with no wait asked for, at load 5 on 2 cores).
    Such a level is held to its steps' median wait, within WAIT_TOLERANCE of the wait
    asked for, or the loader's own cost when that is more.
    """
    compute = float(np.median(trace.compute_seconds[CALIBRATION_STEPS:]))
    own = float(np.median(trace.wait_seconds[1:CALIBRATION_STEPS]))  # the first is cold
    asked = multiple * compute
    if own < ROOM * asked:
        target, within = multiple / (1 + multiple), TOLERANCE
        got = trace.wait_share
    else:
        target, within = max(asked, own), WAIT_TOLERANCE
        got = float(np.median(trace.wait_seconds[CALIBRATION_STEPS:]))
    if abs(got / target - 1) <= within:
        return ""
    kind = "share" if own < ROOM * asked else "median wait (s)"
    return f"{kind} {got:.3g}, target {target:.3g}: {got / target - 1:+.0%}"


def _off_twice(recipe: Recipe, multiple: float) -> str:
    """How a run of ``recipe`` missed its share, and a second one after it ("" when
    either did not). A run lasts about a second, and a stall of the machine inside a
    fetch (another process's tenth of a second: CI once measured 0.42 for 0.167) can be
    made up for only by what the later fetches can give back, the wait asked for less
    the loader's own cost. A level off in two runs in a row is off."""
    first = _run_off(recipe, multiple)
    if not first:
        return ""
    second = _run_off(recipe, multiple)
    return f"{first}; again: {second}" if second else ""


def _run_off(recipe: Recipe, multiple: float) -> str:
    trace = train(recipe).trace
    assert trace is not None
    return _off(trace, multiple)


@pytest.mark.slow
@pytest.mark.parametrize("load", ["idle", "loaded"])
@pytest.mark.parametrize("task", ["digits", "shapes"])
def test_each_level_waits_its_share_of_the_step(task: str, load: str) -> None:
    # digits' MLP steps take about 0.5 ms, shapes' CNN about 1.5 ms; "loaded" keeps
    # another core busy while they train (more processes than cores in a test run).
    setup = base_setup(get_task(task), 0)
    spinner = _spinner() if load == "loaded" else None
    try:
        off = {}
        for ident, multiple in itertools.product(VARIANTS, MULTIPLES):
            off[ident, multiple] = _off_twice(condition((ident, multiple)).apply(setup), multiple)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    assert not {cell: why for cell, why in off.items() if why}, off


# -- the same data -------------------------------------------------------------------------


def _batches(stream: Iterator[Batch], n: int) -> list[Batch]:
    return [next(stream) for _ in range(n)]


def test_a_starved_loader_hands_over_the_batches_it_always_did() -> None:
    recipe = _digits()
    n = 3 * (len(recipe.y_train) // recipe.batch_size)  # three epochs
    plain = DataLoader(
        TensorDataset(torch.from_numpy(recipe.X_train), torch.from_numpy(recipe.y_train)),
        batch_size=recipe.batch_size,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(recipe.seed),
    )
    expected = {
        VARIANTS[0]: _batches(recipe.loader(recipe), n),
        VARIANTS[1]: _batches(itertools.chain.from_iterable(itertools.repeat(plain, 3)), n),
    }
    for ident, batches in expected.items():
        starved = condition((ident, LEAST_WAITING)).apply(recipe)
        for (x, y), (x0, y0) in zip(_batches(starved.loader(starved), n), batches, strict=True):
            assert torch.equal(x, x0) and x.dtype == x0.dtype
            assert torch.equal(y, y0) and y.dtype == y0.dtype


@pytest.mark.parametrize("task", ["digits", "churn"])  # one input; codes beside numbers
@pytest.mark.parametrize("loader", LOADERS)
def test_a_starved_loader_starves_every_loader_a_design_draws(loader: str, task: str) -> None:
    # A pause wraps the design's own loader; a slow Dataset is a DataLoader of items, which
    # hands over what the design's Dataset-of-items loader does. Past the calibration steps,
    # so the waits have started.
    the_task = get_task(task)
    recipe = base_setup(the_task, 0, the_task.reference_design().replace(loader=loader))
    items = base_setup(the_task, 0, the_task.reference_design().replace(loader="dataset"))
    n = CALIBRATION_STEPS + 5
    expected = {
        VARIANTS[0]: _batches(recipe.loader(recipe), n),
        VARIANTS[1]: _batches(items.loader(items), n),
    }
    for ident, batches in expected.items():
        starved = condition((ident, LEAST_WAITING)).apply(recipe)
        for got, want in zip(_batches(starved.loader(starved), n), batches, strict=True):
            assert type(got[0]) is type(want[0])
            inputs = zip(*(b[0] if isinstance(b[0], tuple) else (b[0],) for b in (got, want)))
            assert all(torch.equal(a, b) for a, b in inputs) and torch.equal(got[1], want[1])


# -- a healthy run is not data-bound; one batch handed over at a time from a worker is -----


def _healthy_wait(task: str, loader: str) -> float:
    """The wait share of a healthy run of ``task``'s reference design on ``loader``: the
    lesser of two runs where the first is over a tenth (a run lasts about a second, and a
    stall of a busy machine inside a fetch is a wait, as in _off_twice)."""
    the_task = get_task(task)
    recipe = base_setup(the_task, 0, the_task.reference_design().replace(loader=loader))
    shares: list[float] = []
    while len(shares) < 2 and (not shares or shares[0] > 0.1):
        trace = train(recipe).trace
        assert trace is not None
        shares.append(trace.wait_share)
    return min(shares)


# digits' MLP steps in about 0.4 ms, the shortest of the tuned-on tasks; ratings draws the
# largest batches (128 rows): the loaders' per-batch work is largest there.
@pytest.mark.parametrize("task", ["digits", "ratings"])
@pytest.mark.parametrize("loader", LOADERS)
def test_no_loader_of_the_family_makes_a_small_models_healthy_run_data_bound(
    loader: str, task: str
) -> None:
    share = _healthy_wait(task, loader)
    assert share < DATA_BOUND / 2, share  # well below: it waits under a quarter of its compute


def test_one_worker_handing_each_batch_over_starves_a_small_model_and_changes_no_number() -> None:
    # The family's loader before this round: the healthy run's accuracy, most of its time
    # spent waiting.
    healthy = train(_digits()).trace
    starved = train(condition("starved_loader.one_worker").apply(_digits())).trace
    assert healthy is not None and starved is not None
    assert data_bound_verdict(starved), starved.wait_share
    assert starved.val_acc[-1] == pytest.approx(healthy.val_acc[-1], abs=0.03)


def _whole_shuffled_epochs(got: list[Batch], again: list[Batch], per_epoch: int) -> None:
    """``got`` is ``again`` (a seeded loader's batches twice), of full batches, each epoch
    of ``per_epoch`` batches a shuffle of rows (no row twice) and the next another."""
    for (x, y), (x0, y0) in zip(got, again, strict=True):
        xs, x0s = (x, x0) if isinstance(x, tuple) else ((x,), (x0,))
        assert all(torch.equal(a, b) for a, b in zip(xs, x0s, strict=True))
        assert torch.equal(y, y0) and len(y) == len(got[0][1])
    numbers = [b[0][1] if isinstance(b[0], tuple) else b[0] for b in got]
    for start in range(0, len(got) - per_epoch + 1, per_epoch):
        rows = torch.cat(numbers[start : start + per_epoch])
        assert len(torch.unique(rows, dim=0)) == len(rows)
    first, second = (torch.cat(numbers[i * per_epoch : (i + 1) * per_epoch]) for i in (0, 1))
    assert not torch.equal(first, second)


def test_one_worker_hands_over_whole_shuffled_epochs_the_same_every_time() -> None:
    recipe = condition("starved_loader.one_worker").apply(_digits())
    per_epoch = len(recipe.y_train) // recipe.batch_size
    n = 3 * per_epoch  # three epochs, the worker kept from one to the next
    got, again = (_batches(recipe.loader(recipe), n) for _ in range(2))
    _whole_shuffled_epochs(got, again, per_epoch)


@pytest.mark.parametrize("task", ["digits", "churn"])  # one input; codes beside numbers
def test_the_worker_loader_hands_over_whole_shuffled_epochs_across_its_shards(task: str) -> None:
    the_task = get_task(task)
    recipe = base_setup(the_task, 0, the_task.reference_design().replace(loader="workers"))
    per_epoch = len(recipe.y_train) // recipe.batch_size
    n = SHARD_BATCHES + 2 * per_epoch  # past the first shard and an epoch's end inside it
    got, again = (_batches(recipe.loader(recipe), n) for _ in range(2))
    _whole_shuffled_epochs(got, again, per_epoch)
