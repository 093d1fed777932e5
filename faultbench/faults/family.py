"""Drawing a task's healthy designs: one base recipe per run, a pure function of (task, seed).

A draw picks each axis of the task's :class:`~faultbench.tasks.design.Family`
uniformly with a ``numpy`` generator seeded from ``SeedSequence([task, seed,
attempt])``: the same task and seed draw the same design on any machine, and
a draw never depends on what was drawn before it. ``attempt`` is the sub-seed:
a design that does not train healthy on its seed is redrawn from the next one
(:mod:`faultbench.storage.bases` decides, and counts the redraws).

The optimizer's rate is its working rate on the task, measured by a sweep
(``faultbench calibrate``, :mod:`faultbench.tools.rates`) and recorded in
:data:`RATES_FILE`, a versioned file of the repository. A task without a
measured rate (a user's ``Task.from_arrays``) gets :data:`CANONICAL_RATES`,
and the report says so.
"""

from __future__ import annotations

import csv
import io
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from faultbench.tasks.design import WEIGHT_DECAY, Design, Family, Network
from faultbench.tasks.task import Task

RATES_FILE = Path(__file__).resolve().with_name("rates.csv")  # resolve: the source, not a link
RATE_FIELDS = ("task", "optimizer", "lr", "val_acc", "working", "seeds", "code")
#: Rates for tasks no sweep has measured: each optimizer's usual default for a small network.
CANONICAL_RATES = {"adam": 1e-3, "adamw": 1e-3, "sgd": 1e-2, "rmsprop": 1e-3}


@dataclass(frozen=True)
class RatePoint:
    """One rate of one optimizer on one task, as the sweep measured it."""

    task: str  # the task it was measured on
    optimizer: str  # adam, adamw, sgd or rmsprop
    lr: float  # the rate
    val_acc: float  # median final validation accuracy over the sweep's seeds
    working: bool  # whether the sweep chose it as the optimizer's working rate
    seeds: str  # the sweep's seeds, space separated
    code: str = ""  # what it was measured on (faultbench.tools.rates.measured_on)


def load_rates(path: Path = RATES_FILE) -> list[RatePoint]:
    """Every sweep point in ``path`` (none when the file does not exist)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return []
    return list(_read_rates(path, stat.st_size, stat.st_mtime_ns))


@cache
def _read_rates(path: Path, size: int, mtime_ns: int) -> tuple[RatePoint, ...]:
    with path.open(newline="") as handle:
        return tuple(
            RatePoint(
                row["task"],
                row["optimizer"],
                float(row["lr"]),
                float(row["val_acc"]),
                row["working"] == "1",
                row["seeds"],
                row.get("code") or "",
            )
            for row in csv.DictReader(handle)
        )


def write_rates(points: list[RatePoint], path: Path = RATES_FILE) -> Path:
    """Write ``points`` sorted (stable bytes; a file that holds them already is left alone)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(RATE_FIELDS)
    for p in sorted(points, key=lambda p: (p.task, p.optimizer, p.lr)):
        writer.writerow(
            [
                p.task,
                p.optimizer,
                f"{p.lr:.6g}",
                f"{p.val_acc:.4f}",
                int(p.working),
                p.seeds,
                p.code,
            ]
        )
    if path.is_file() and path.read_text() == text.getvalue():
        return path
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text.getvalue())
    tmp.replace(path)
    return path


def working_rates(task: Task, path: Path = RATES_FILE) -> dict[str, float]:
    """Optimizer -> working rate on ``task``: measured, else canonical (see :func:`measured`)."""
    found = {p.optimizer: p.lr for p in load_rates(path) if p.task == task.name and p.working}
    rates = {**CANONICAL_RATES, task.defaults.optimizer: task.defaults.lr}
    return {name: found.get(name, rates[name]) for name in task.design_family().optimizers}


def measured(task: Task, path: Path = RATES_FILE) -> bool:
    """Whether a sweep measured the working rates of ``task``'s optimizers."""
    have = {p.optimizer for p in load_rates(path) if p.task == task.name and p.working}
    return set(task.design_family().optimizers) <= have


def draw_design(task: Task, seed: int, attempt: int = 0) -> Design:
    """The design drawn for run ``seed`` of ``task`` at sub-seed ``attempt`` (0 first).

    Raises:
        ValueError: a negative seed or attempt.
    """
    if seed < 0 or attempt < 0:
        raise ValueError(f"seed and attempt must be >= 0; got {seed}, {attempt}")
    family = task.design_family()
    entropy = [zlib.crc32(task.name.encode()), seed, attempt]
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))

    def pick(values: tuple[Any, ...]) -> Any:
        return values[int(rng.integers(len(values)))]

    optimizer = pick(family.optimizers)
    depth = pick(family.depths)
    widths = tuple(int(pick(family.widths)) for _ in range(depth))
    net = Network(
        architecture=family.architecture,
        widths=widths,
        activation=pick(family.activations),
        norm=pick(family.norms),
        dropout=float(pick(family.dropouts)),
        init=pick(family.inits),
    )
    batch_size, schedule = int(pick(family.batch_sizes)), pick(family.schedules)
    clip, decay = float(pick(family.clips)), pick(family.weight_decays)
    if family.architecture == "cnn":
        convolutions = pick(family.convolutions)
        channels = tuple(int(pick(family.channels)) for _ in range(convolutions))
        net = net.replace(channels=channels, downsample=pick(family.downsamples))
    if family.architecture == "gru":
        net = net.replace(
            cell=pick(family.cells), embed=int(pick(family.embeds)), state=int(pick(family.states))
        )
    if family.architecture == "tabular":
        net = net.replace(embed=int(pick(family.embeds)))
    if family.architecture == "transformer":  # one residual width: every block takes the first
        net = net.replace(widths=(widths[0],) * depth, heads=int(pick(family.heads)))
    loader = pick(family.loaders)  # last: the axes drawn before it keep their draws
    return Design(
        network=net,
        optimizer=optimizer,
        lr=working_rates(task)[optimizer],
        batch_size=batch_size,
        schedule=schedule,
        clip=clip,
        weight_decay=WEIGHT_DECAY[optimizer] if decay == "on" else 0.0,
        momentum=task.defaults.momentum,
        loader=loader,
        attempt=attempt,
    )


def describe_family(family: Family) -> list[tuple[str, str]]:
    """(axis, its values) for every axis of ``family``, as ``faultbench list`` prints them."""
    out = []
    for axis, values in family.axes().items():
        shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
        if axis == "weight_decays":
            usual = ", ".join(f"{name} {value:g}" for name, value in WEIGHT_DECAY.items())
            shown += f" (on: the optimizer's usual: {usual})"
        if axis == "optimizers":
            shown += " (each at its working rate on the task; SGD with momentum)"
        out.append((axis, shown))
    return out
