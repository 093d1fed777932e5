"""``synthetic``: the held-out task, generated the same way on every machine.

Its shape differs from digits on purpose (20 features, 6 classes), so that
rules which silently assume 64 inputs or 10 classes show it. A test pins a
checksum of the arrays: change nothing here without meaning to.
"""

from __future__ import annotations

import numpy as np

from faultbench.tasks.task import TASKS, Task

SEED = 20_240_611  # the generator's seed; part of the task's identity
N_CLASSES = 6
N_FEATURES = 20
N_INFORMATIVE = 8  # the other features are pure noise
CLUSTERS_PER_CLASS = 2  # each class is two blobs, so classes are not linearly separable
PER_CLUSTER = 150
SEPARATION = 3.0  # distance scale between blob centres, in noise standard deviations


def synthetic_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Generate the raw (X, y) of the synthetic task."""
    rng = np.random.Generator(np.random.PCG64(SEED))
    n_clusters = N_CLASSES * CLUSTERS_PER_CLASS
    centres = rng.normal(0.0, SEPARATION, size=(n_clusters, N_INFORMATIVE))
    cluster = np.repeat(np.arange(n_clusters), PER_CLUSTER)
    informative = centres[cluster] + rng.normal(0.0, 1.0, size=(len(cluster), N_INFORMATIVE))
    noise = rng.normal(0.0, 1.0, size=(len(cluster), N_FEATURES - N_INFORMATIVE))
    rotation, _ = np.linalg.qr(rng.normal(size=(N_FEATURES, N_FEATURES)))
    X = np.hstack([informative, noise]) @ rotation  # mix signal into every feature
    y = cluster % N_CLASSES
    order = rng.permutation(len(y))
    return X[order], y[order]


@TASKS.register("synthetic")
def build_synthetic() -> Task:
    """1,800 examples, 20 features, 6 classes of two Gaussian blobs each."""
    X, y = synthetic_arrays()
    return Task.from_arrays("synthetic", X, y)
