"""The statistics every table uses, in one place: Wilson intervals, McNemar's exact test,
and bootstrap intervals (each through scipy, never rewritten).

- :func:`wilson`: a share with its 95% Wilson score interval (``binomtest``), because a
  perfect 50/50 only bounds accuracy above 0.929 and two diagnosers are told apart by
  intervals, not by point values.
- :func:`mcnemar_p`: the exact McNemar test of two diagnosers on the same runs: the
  two-sided binomial test of the runs only one got right, at 1/2.
- :func:`bootstrap`: a percentile bootstrap interval of any statistic of one or more
  samples (``scipy.stats.bootstrap``), seeded so it is the same on every machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_REPS = 2000  # resamples of a bootstrap interval
BOOTSTRAP_SEED = 20250131  # its seed: the interval is the same on every machine


@dataclass(frozen=True)
class Share:
    """A proportion with its 95% Wilson interval."""

    hits: int  # runs that count
    n: int  # runs considered
    low: float  # lower bound of the interval (nan when n is 0)
    high: float  # upper bound of the interval (nan when n is 0)

    @property
    def value(self) -> float:
        """``hits / n`` (nan when n is 0)."""
        return self.hits / self.n if self.n else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (None where there were no runs)."""
        if not self.n:
            return {"hits": 0, "n": 0, "value": None, "low": None, "high": None}
        return {
            "hits": self.hits,
            "n": self.n,
            "value": self.value,
            "low": self.low,
            "high": self.high,
        }

    def __str__(self) -> str:
        if not self.n:
            return "n/a"
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}] ({self.hits}/{self.n})"


@cache  # a report asks for the same few counts thousands of times; binomtest is slow
def wilson(hits: int, n: int) -> Share:
    """``hits`` out of ``n`` with its 95% Wilson score interval."""
    if n == 0:
        return Share(0, 0, float("nan"), float("nan"))
    from scipy.stats import binomtest

    interval = binomtest(int(hits), int(n)).proportion_ci(CONFIDENCE, method="wilson")
    return Share(int(hits), int(n), float(interval.low), float(interval.high))


def mcnemar_p(only_first: int, only_second: int) -> float:
    """The exact McNemar p-value: two-sided binomial test of ``only_first`` out of the
    discordant runs at 1/2 (1.0 when no run is discordant)."""
    from scipy.stats import binomtest

    discordant = only_first + only_second
    return float(binomtest(only_first, discordant, 0.5).pvalue) if discordant else 1.0


def bootstrap(
    samples: Sequence[np.ndarray],
    statistic: Callable[..., Any],
    *,
    paired: bool = False,
    vectorized: bool = False,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """The 95% percentile bootstrap interval of ``statistic(*samples)``.

    Args:
        samples: One array per argument of ``statistic``, each resampled on its own
            (``paired=False``) or all by the same indices (``paired=True``).
        statistic: A function of the samples; with ``vectorized``, it also takes ``axis``
            and reduces along it (many resamples at once: far faster).
        paired: Resample the samples together (one draw of rows).
        vectorized: ``statistic`` takes ``axis``.
        reps: Resamples.
        seed: The resampling's seed.

    Returns:
        (low, high); (nan, nan) when a sample is empty or the statistic is not defined.
    """
    from scipy.stats import bootstrap as scipy_bootstrap

    arrays = tuple(np.asarray(s, dtype=float) for s in samples)
    if not arrays or any(a.size == 0 for a in arrays):
        return float("nan"), float("nan")
    # a sample of one run resamples as itself, every time (scipy asks for two)
    arrays = tuple(np.repeat(a, 2) if a.size == 1 else a for a in arrays)
    if all(np.all(a == a[0]) for a in arrays):  # no spread: every resample says the same
        value = float(statistic(*arrays, axis=-1) if vectorized else statistic(*arrays))
        return value, value
    found = scipy_bootstrap(
        arrays,
        statistic,
        n_resamples=reps,
        paired=paired,
        vectorized=vectorized,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(found.confidence_interval.low), float(found.confidence_interval.high)
