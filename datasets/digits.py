"""``digits``: scikit-learn's bundled 8x8 handwritten digits, the tuned-on task."""

from __future__ import annotations

from sklearn.datasets import load_digits

from faultbench.tasks.task import TASKS, Task


@TASKS.register("digits")
def build_digits() -> Task:
    """1,797 images of 64 pixels, 10 classes; bundled with scikit-learn, no download."""
    data = load_digits()
    return Task.from_arrays("digits", data.data, data.target)
