"""``forecast``: the next 8 values of a seasonal series from its last 24 (8-target regression).

Generated in code (fixed generator and seed), so nothing is downloaded. Each example is
its own series: a level, a trend, a seasonal wave of period 6, 8 or 12 with a second
harmonic, and noise, all drawn per series; the model sees its last :data:`WINDOW` values
and predicts the :data:`HORIZON` that follow, one output each (a direct multi-step
forecaster, as an MLP over a window is written). One series per example, so no window of
validation overlaps one of training.
"""

from __future__ import annotations

import numpy as np

from faultbench.tasks.design import Family
from faultbench.tasks.task import TASKS, Task, TrainDefaults

SEED = 20_261_206  # the generator's seed; part of the task's identity
SERIES = 2_000  # examples, one series each
WINDOW = 24  # past values the model reads
HORIZON = 8  # future values it predicts
PERIODS = (6, 8, 12)  # the seasons a series may have
NOISE = 0.3  # standard deviation of the noise, against a seasonal amplitude of 0.5 to 2


def forecast_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The raw (X, Y): each row's last WINDOW values, and the HORIZON values after them."""
    rng = np.random.Generator(np.random.PCG64(SEED))
    t = np.arange(WINDOW + HORIZON, dtype=np.float64)
    period = rng.choice(PERIODS, size=(SERIES, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(SERIES, 1))
    amplitude = rng.uniform(0.5, 2.0, size=(SERIES, 1))
    harmonic = rng.uniform(0.0, 0.5, size=(SERIES, 1)) * amplitude  # the wave's second harmonic
    level = rng.normal(0.0, 1.0, size=(SERIES, 1))
    trend = rng.normal(0.0, 0.03, size=(SERIES, 1))
    angle = 2 * np.pi * t / period + phase
    series = level + trend * t + amplitude * np.sin(angle) + harmonic * np.sin(2 * angle)
    series += rng.normal(0.0, NOISE, size=series.shape)
    return series[:, :WINDOW], series[:, WINDOW:]


@TASKS.register("forecast")
def build_forecast() -> Task:
    """2,000 seasonal series: the last 24 values -> the next 8 (regression of 8 targets, R²)."""
    X, Y = forecast_arrays()
    defaults = TrainDefaults(hidden=64, lr=1e-3, batch_size=32, steps=400)
    family = Family("mlp", depths=(1, 2, 3), widths=(32, 64, 128), dropouts=(0.0, 0.1))
    return Task.from_arrays("forecast", X, Y, kind="regression", defaults=defaults, family=family)
