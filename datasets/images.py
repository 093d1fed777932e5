"""``shapes``: the held-out image task (generated shapes, read by a small CNN)."""

from __future__ import annotations

from faultbench.datasets.shapes import SHAPES, SIDE, shapes_arrays
from faultbench.tasks.task import TASKS, Task, TrainDefaults


@TASKS.register("shapes")
def build_shapes() -> Task:
    """2,000 noisy 12x12 images of five shapes; a CNN with one convolution."""
    X, y = shapes_arrays()
    names = [SHAPES[i] for i in y]
    return Task.from_arrays(
        "shapes", X, names, defaults=TrainDefaults(architecture="cnn", image_side=SIDE, lr=3e-3)
    )
