"""The tasks that ship with faultbench (installed as ``faultbench.datasets``)."""

from __future__ import annotations

from faultbench.datasets.digits import build_digits
from faultbench.datasets.images import build_shapes
from faultbench.datasets.language import build_language
from faultbench.datasets.prompts import build_numbers, build_spelling
from faultbench.datasets.synthetic import build_synthetic

__all__ = [
    "build_digits",
    "build_language",
    "build_numbers",
    "build_shapes",
    "build_spelling",
    "build_synthetic",
]
