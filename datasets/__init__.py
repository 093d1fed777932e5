"""The tasks that ship with faultbench (installed as ``faultbench.datasets``)."""

from __future__ import annotations

from faultbench.datasets.autoencoder import build_autoencoder
from faultbench.datasets.codes import build_churn, build_ratings
from faultbench.datasets.digits import build_digits
from faultbench.datasets.forecast import build_forecast
from faultbench.datasets.images import build_shapes
from faultbench.datasets.language import build_language
from faultbench.datasets.prompts import build_numbers, build_spelling
from faultbench.datasets.synthetic import build_synthetic
from faultbench.datasets.tabular import build_cancer, build_diabetes, build_friedman, build_tags

__all__ = [
    "build_autoencoder",
    "build_cancer",
    "build_churn",
    "build_diabetes",
    "build_digits",
    "build_forecast",
    "build_friedman",
    "build_language",
    "build_numbers",
    "build_ratings",
    "build_shapes",
    "build_spelling",
    "build_synthetic",
    "build_tags",
]
