"""``shapes``: the held-out image task (generated shapes, read by a small CNN)."""

from __future__ import annotations

from faultbench.datasets.shapes import SHAPES, SIDE, shapes_arrays
from faultbench.tasks.task import TASKS, Task, TrainDefaults


@TASKS.register("shapes")
def build_shapes() -> Task:
    """2,000 noisy 12x12 images of five shapes; a CNN with one convolution, SGD with momentum.

    SGD with momentum is the classic recipe for convolutional networks, and on
    these images it also trains better than Adam in the same 600 steps.
    """
    X, y = shapes_arrays()
    names = [SHAPES[i] for i in y]
    defaults = TrainDefaults(architecture="cnn", image_side=SIDE, optimizer="sgd", lr=0.05)
    return Task.from_arrays("shapes", X, names, defaults=defaults)
