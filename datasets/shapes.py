"""``shapes``: a held-out image task, 12x12 pictures of five kinds of shape.

Generated in code (fixed generator and seed), so nothing is downloaded. A
small CNN classifies them; the pixels are flattened into rows so the task
goes through the same split and normalization as every other task.
"""

from __future__ import annotations

import numpy as np

SEED = 7_2026  # the generator's seed; part of the task's identity
SIDE = 12  # images are SIDE x SIDE pixels
PER_CLASS = 400
SHAPES = ("square", "disc", "cross", "bar", "ring")
NOISE = 0.15  # standard deviation of the pixel noise


def _canvas() -> tuple[np.ndarray, np.ndarray]:
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(np.float64)
    return yy, xx


def _draw(kind: str, cy: float, cx: float, r: float) -> np.ndarray:
    yy, xx = _canvas()
    dy, dx = yy - cy, xx - cx
    dist = np.hypot(dy, dx)
    if kind == "square":
        return ((np.abs(dy) <= r) & (np.abs(dx) <= r)).astype(float)
    if kind == "disc":
        return (dist <= r).astype(float)
    if kind == "cross":
        return (
            ((np.abs(dy) <= 0.6) & (np.abs(dx) <= r)) | ((np.abs(dx) <= 0.6) & (np.abs(dy) <= r))
        ).astype(float)
    if kind == "bar":
        return ((np.abs(dy) <= 0.8) & (np.abs(dx) <= r + 1)).astype(float)
    return ((dist <= r) & (dist >= r - 1.2)).astype(float)  # ring


def shapes_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Generate the raw (X, y): X has SIDE*SIDE pixel columns, y the shape index."""
    rng = np.random.Generator(np.random.PCG64(SEED))
    images, labels = [], []
    for label, kind in enumerate(SHAPES):
        for _ in range(PER_CLASS):
            r = rng.uniform(2.0, 4.0)
            cy, cx = rng.uniform(r, SIDE - 1 - r, size=2)
            img = _draw(kind, cy, cx, r) + rng.normal(0.0, NOISE, size=(SIDE, SIDE))
            images.append(img.reshape(-1))
            labels.append(label)
    order = rng.permutation(len(labels))
    return np.array(images)[order], np.array(labels)[order]
