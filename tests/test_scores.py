"""The scores against independent computations: closed-form Wilson, a binomial sum for McNemar."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from faultbench.scoring import scores
from faultbench.scoring.contract import UNDECIDED
from faultbench.scoring.scores import (
    alarm_precision,
    detection,
    false_alarms,
    identification,
    known_detection,
    mcnemar,
    summary,
    undecided,
    wilson,
)

Z = 1.959963984540054  # the 97.5% normal quantile


def _wilson_by_hand(k: int, n: int) -> tuple[float, float]:
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize(("k", "n"), [(0, 5), (3, 7), (48, 50), (50, 50), (1, 1)])
def test_wilson_matches_the_closed_form(k: int, n: int) -> None:
    share = wilson(k, n)
    low, high = _wilson_by_hand(k, n)
    assert share.low == pytest.approx(max(0.0, low), abs=1e-9)
    assert share.high == pytest.approx(min(1.0, high), abs=1e-9)
    assert share.value == k / n


def test_a_perfect_fifty_bounds_accuracy_only_above_0929() -> None:
    assert round(wilson(50, 50).low, 3) == 0.929


def _row(diagnoser: str, truth: str, kind: str, predicted: str, **extra: object) -> dict:
    row = {
        "diagnoser": diagnoser,
        "task": "digits",
        "tuned": True,
        "seed": 0,
        "truth": truth,
        "kind": kind,
        "variant": "",
        "level": "",
        "grid": "full",
        "predicted": predicted,
        "status": "ok",
        "probe_steps": 0,
        "diagnose_seconds": 0.0,
        "drawn": True,
        "every": 20,
    }
    row.update(extra)
    return row


def _frame() -> pd.DataFrame:
    rows = [
        _row("a", "healthy", "healthy", "healthy"),
        _row("a", "healthy", "healthy", "dead_units", seed=1),  # a false alarm
        _row("a", "lr_too_high", "known", "lr_too_high", level="mild", variant="constant"),
        _row("a", "lr_too_high", "known", "healthy", level="severe", variant="sgd", seed=1),
        _row(
            "a", "lr_too_high", "known", "lr_too_high", level="severe", variant="constant", seed=2
        ),
        _row("a", "dead_units", "known", "dead_units", level="mild", variant="bias"),
        _row("a", "label_noise", "heldout", "other_fault"),
        _row("a", "label_noise", "heldout", "healthy", seed=1),
        _row("a", "tiny_clip", "heldout", "lr_too_high"),
        _row("a", "tiny_clip", "heldout", "unknown", status="timeout", seed=1),
    ]
    return pd.DataFrame(rows)


def test_identification_counts_known_faults_only() -> None:
    ident = identification(_frame())
    assert (ident["accuracy"].hits, ident["accuracy"].n) == (3, 4)
    # recall: lr_too_high 2/3, dead_units 1/1 -> macro (2/3 + 1) / 2
    assert ident["macro_recall"] == pytest.approx((2 / 3 + 1) / 2)
    assert (ident["by_level"]["severe"].hits, ident["by_level"]["severe"].n) == (1, 2)
    assert (ident["by_variant"]["constant"].hits, ident["by_variant"]["constant"].n) == (2, 2)


def test_detection_and_false_alarms() -> None:
    found = detection(_frame())
    # four held-out runs: other_fault, healthy, lr_too_high, a timeout (detects nothing)
    assert (found["not_healthy"].hits, found["not_healthy"].n) == (2, 4)
    assert (found["other_fault"].hits, found["other_fault"].n) == (1, 4)
    alarms = false_alarms(_frame())
    assert (alarms.hits, alarms.n) == (1, 2)


def test_undecided_is_scored_apart_from_right_and_wrong() -> None:
    frame = pd.concat(
        [
            _frame(),
            pd.DataFrame(
                [
                    _row("a", "healthy", "healthy", "undecided", seed=2),
                    _row("a", "dead_units", "known", "undecided", level="mild", seed=3),
                    _row("a", "label_noise", "heldout", "undecided", seed=2),
                ]
            ),
        ],
        ignore_index=True,
    )
    # never an alarm: the healthy run's undecided is no false alarm, the held-out one's no
    # detection, and it is not in alarm precision's alarms
    alarms = false_alarms(frame)
    assert (alarms.hits, alarms.n) == (1, 3)
    assert (detection(frame)["not_healthy"].hits, detection(frame)["not_healthy"].n) == (2, 5)
    assert (known_detection(frame).hits, known_detection(frame).n) == (3, 5)
    assert (alarm_precision(frame).hits, alarm_precision(frame).n) == (5, 6)
    # never correct: identification counts it as a miss
    assert (identification(frame)["accuracy"].hits, identification(frame)["accuracy"].n) == (3, 5)
    # and its share is reported, of every run
    share = undecided(frame)
    assert (share.hits, share.n) == (3, len(frame)) and summary(frame)["undecided"] == share
    assert scores.UNDECIDED == UNDECIDED


def test_summary_splits_tuned_and_held_out_tasks() -> None:
    frame = _frame()
    frame.loc[frame["seed"] == 1, "tuned"] = False
    result = summary(frame)
    assert result["splits"]["tuned_on_task"]["identification"].n == 3
    assert result["splits"]["held_out_task"]["identification"].n == 1


def test_mcnemar_is_the_exact_binomial_test_on_discordant_runs() -> None:
    # a is right on seeds 0..9; b on seeds 0, 1, 2 and 10.
    first = [_row("a", "healthy", "healthy", "healthy", seed=s) for s in range(12)]
    second = [
        _row("b", "healthy", "healthy", "healthy" if s < 3 or s == 10 else "dead_units", seed=s)
        for s in range(12)
    ]
    first[10]["predicted"] = first[11]["predicted"] = "dead_units"
    test = mcnemar(pd.DataFrame(first + second), "a", "b")
    only_a, only_b = 7, 1  # a alone on 3..9; b alone on 10
    assert (test.only_first, test.only_second, test.runs) == (only_a, only_b, 12)
    n = only_a + only_b
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n
    assert test.p_value == pytest.approx(min(1.0, 2 * tail))


def test_the_bootstrap_interval_matches_a_resampling_done_by_hand() -> None:
    from faultbench.scoring.stats import bootstrap

    rng = np.random.default_rng(1)
    a, b = (rng.random(200) < 0.7).astype(float), (rng.random(120) < 0.4).astype(float)
    low, high = bootstrap([a, b], lambda x, y, axis=-1: (x.mean(axis) + y.mean(axis)) / 2,
                          vectorized=True)  # fmt: skip
    draws = np.random.default_rng(2)
    by_hand = [
        (draws.choice(a, a.size).mean() + draws.choice(b, b.size).mean()) / 2 for _ in range(4000)
    ]
    assert low == pytest.approx(np.percentile(by_hand, 2.5), abs=0.01)
    assert high == pytest.approx(np.percentile(by_hand, 97.5), abs=0.01)
    assert bootstrap([np.ones(5), np.ones(3)], lambda x, y: 1.0) == (1.0, 1.0)
    low, high = bootstrap([a, np.ones(1)], lambda x, y: (x.mean() + y.mean()) / 2)
    assert low < (a.mean() + 1) / 2 < high  # a sample of one resamples as itself
