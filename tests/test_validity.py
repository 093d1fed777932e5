"""The grid against the real bugs: rank correlations and their bootstrap
(faultbench.reporting.validity)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from faultbench.reporting.validity import (
    bootstrap,
    correlations,
    disagreements,
    draw_correlations,
    grid_rates,
    grid_rates_from_results,
    is_baseline,
    kind_shares,
    measure,
    suite_matrix,
)
from faultbench.scoring import scores

REPO = Path(__file__).resolve().parents[1]


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b from its definition: pairs, with both sides' ties."""
    concordant = discordant = ties_x = ties_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif dx == dy:
            concordant += 1
        else:
            discordant += 1
    n0 = concordant + discordant
    return (n0 - 2 * discordant) / math.sqrt((n0 + ties_x) * (n0 + ties_y))


def midranks(values: list[float]) -> np.ndarray:
    """Ranks 1..n, ties sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = np.empty(len(values))
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rho as the Pearson correlation of the midranks."""
    rx, ry = midranks(x), midranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx @ ry) / math.sqrt((rx @ rx) * (ry @ ry)))


@pytest.mark.parametrize("seed", range(6))
def test_correlations_match_an_independent_computation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = list(rng.integers(0, 5, size=12) / 4)  # ties on both sides, as shares have
    y = list(rng.integers(0, 4, size=12) / 3)
    tau, rho = correlations(np.array(x), np.array(y))
    assert tau == pytest.approx(kendall_tau_b(x, y), abs=1e-12)
    assert rho == pytest.approx(spearman(x, y), abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_draw_correlations_give_each_draw_what_correlations_gives(seed: int) -> None:
    """The bootstrap's batched form is the same number, bit for bit, as one call per draw
    (so the shipped intervals do not move), undefined draws included."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 5, size=12) / 4
    ys = rng.integers(0, 4, size=(40, 12)) / 3
    ys[3] = 0.5  # a constant draw
    ys[7, 2] = math.nan  # a draw with an undefined share
    found = draw_correlations(x, ys)
    expected = np.array([correlations(x, y) for y in ys]).T
    assert found.shape == (2, 40) and np.isnan(found[:, [3, 7]]).all()
    assert np.array_equal(found, expected, equal_nan=True)
    assert np.isnan(draw_correlations(np.ones(12), ys)).all()


def test_a_constant_side_has_no_correlation() -> None:
    assert all(math.isnan(v) for v in correlations(np.ones(5), np.arange(5.0)))
    assert all(math.isnan(v) for v in correlations(np.arange(2.0), np.arange(2.0)))
    assert correlations(np.arange(5.0), np.arange(5.0) ** 2) == pytest.approx((1.0, 1.0))


CASES = {  # case -> label (three known, one out of the list)
    "c1": "lr_too_high",
    "c2": "dead_units",
    "c3": "lr_too_high",
    "c4": "other_fault",
}
KINDS = {"c1": "regression", "c2": "multiclass", "c3": "regression", "c4": "regression"}
#: diagnoser -> per case: faulty answer, fixed answer
ANSWERS = {
    "a": {"c1": ("lr_too_high", "healthy"), "c2": ("dead_units", "healthy"),
          "c3": ("lr_too_high", "healthy"), "c4": ("other_fault", "healthy")},
    "b": {"c1": ("lr_too_high", "dead_units"), "c2": ("healthy", "healthy"),
          "c3": ("dead_units", "healthy"), "c4": ("healthy", "healthy")},
    "c": {"c1": ("healthy", "lr_too_high"), "c2": ("healthy", "dead_units"),
          "c3": ("healthy", "healthy"), "c4": ("dead_units", "lr_too_high")},
}  # fmt: skip


def answers() -> pd.DataFrame:
    rows = []
    for name, per_case in ANSWERS.items():
        for case, (faulty, fixed) in per_case.items():
            for form, predicted in (("faulty", faulty), ("fixed", fixed)):
                rows.append(
                    {
                        "diagnoser": name,
                        "case": case,
                        "label": CASES[case],
                        "task_kind": KINDS[case],
                        "form": form,
                        "predicted": predicted,
                        "status": "ok",
                    }
                )
    return pd.DataFrame(rows)


GRID = pd.DataFrame(
    {
        "identification": [0.9, 0.5, 0.1],
        "false_alarms": [0.0, 0.3, 0.6],
        "not_healthy": [1.0, 0.5, 0.8],
        "recall:lr_too_high": [1.0, 0.6, 0.2],
        "recall:dead_units": [0.8, 0.4, 0.0],
    },
    index=pd.Index(["a", "b", "c"], name="diagnoser"),
)


def test_suite_scores_are_counted_by_hand() -> None:
    suite = suite_matrix(answers(), ["a", "b", "c"])
    np.testing.assert_allclose(suite.identification(), [3 / 3, 1 / 3, 0 / 3])
    np.testing.assert_allclose(suite.false_alarms(), [0 / 4, 1 / 4, 3 / 4])
    draw = np.array([0, 0, 3, 3])  # c1 twice, c4 twice: one known case
    np.testing.assert_allclose(suite.identification(draw), [1.0, 1.0, 0.0])
    np.testing.assert_allclose(suite.false_alarms(draw), [0.0, 0.5, 1.0])


def test_a_diagnoser_that_missed_a_case_is_refused() -> None:
    frame = answers()
    with pytest.raises(ValueError, match=r"\['b'\] did not answer"):
        suite_matrix(frame.drop(index=frame.index[frame["diagnoser"] == "b"][0]), ["a", "b"])


def test_bootstrap_recomputes_each_draw_and_is_seeded() -> None:
    suite = suite_matrix(answers(), ["a", "b", "c"])
    found = {s.statistic: s for s in bootstrap(GRID, suite, reps=200, seed=7)}
    ident = found["identification kendall_tau"]
    assert ident.value == pytest.approx(1.0) and ident.cases == 3 and ident.diagnosers == 3
    assert ident.reps + ident.undefined == 200 and ident.undefined > 0  # draws without c1/c3
    fa = found["false_alarms spearman_rho"]
    assert fa.value == pytest.approx(1.0) and fa.cases == 4
    # the interval is the percentiles of the draws' correlations, recomputed independently
    draws = np.random.default_rng(7).integers(0, 4, size=(200, 4))
    rhos = []
    for draw in draws:
        chosen = answers().merge(pd.DataFrame({"case": [f"c{i + 1}" for i in draw]}), on="case")
        fixed = chosen[chosen["form"] == "fixed"]
        alarms = (fixed["predicted"] != "healthy").groupby(fixed["diagnoser"]).mean()
        x, y = list(GRID["false_alarms"]), list(alarms.loc[["a", "b", "c"]])
        if len(set(y)) > 1:
            rhos.append(spearman(x, y))
    assert fa.reps == len(rhos)
    assert (fa.low, fa.high) == pytest.approx(tuple(np.percentile(rhos, [2.5, 97.5])))
    again = {s.statistic: s for s in bootstrap(GRID, suite, reps=200, seed=7)}
    assert again == found


def test_out_of_list_detection_and_kinds_are_counted_by_hand() -> None:
    suite = suite_matrix(answers(), ["a", "b", "c"])
    np.testing.assert_allclose(suite.out_of_list(), [1.0, 0.0, 1.0])  # c4 not called healthy
    assert suite.kinds == ("regression", "multiclass", "regression", "regression")
    regression = suite.of_kind("regression")
    assert regression.cases == ("c1", "c3", "c4")
    np.testing.assert_allclose(regression.identification(), [1.0, 0.5, 0.0])
    np.testing.assert_allclose(regression.false_alarms(), [0.0, 1 / 3, 2 / 3])
    shares = kind_shares(suite).set_index(["kind", "diagnoser"])
    row = shares.loc[("regression", "b")]
    assert (row["identification_hits"], row["identification_n"]) == (1, 2)
    assert (row["false_alarms_hits"], row["false_alarms_n"]) == (1, 3)
    expected = scores.wilson(1, 3)
    assert (row["false_alarms_low"], row["false_alarms_high"]) == (expected.low, expected.high)


def test_statistics_come_per_form_and_per_kind_with_enough_cases() -> None:
    names = {"a": "rules", "b": "learned", "c": "random"}  # measure asks which are baselines
    found = measure(GRID.rename(index=names), answers().replace({"diagnoser": names}), reps=100)
    table = found.statistics.set_index("statistic")
    assert table.loc["identification kendall_tau", "form"] == "faulty"
    assert table.loc["out_of_list spearman_rho", "cases"] == 1
    assert table.loc["false_alarms kendall_tau", "form"] == "fixed"
    # regression has 3 twins (enough), 2 known-label cases and 1 out-of-list (too few)
    assert table.loc["false_alarms kendall_tau [regression]", "cases"] == 3
    assert "identification kendall_tau [regression]" not in table.index
    assert not any("[multiclass]" in name for name in table.index)  # one case only
    assert list(found.statistics["form"]) == sorted(found.statistics["form"])  # faulty first
    assert found.known_labels == {"dead_units": 1, "lr_too_high": 2}
    assert found.case_kinds == {"multiclass": 1, "regression": 3}
    assert set(found.gaps["kind"]) == {"regression", "multiclass"}


def test_the_interval_is_scipys_percentile_interval_when_every_draw_is_defined() -> None:
    from scipy import stats

    from faultbench.reporting.validity import SuiteMatrix

    alarmed = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 0]], dtype=bool)  # a < c < b
    none = np.zeros_like(alarmed)
    suite = SuiteMatrix(
        ("a", "b", "c"), tuple(CASES), tuple(CASES.values()), ("multiclass",) * 4,
        none, none, alarmed, ~alarmed,
    )  # fmt: skip
    x = GRID["false_alarms"].to_numpy()
    rho = {s.statistic: s for s in bootstrap(GRID, suite, reps=300, seed=11)}[
        "false_alarms spearman_rho"
    ]
    assert rho.undefined == 0  # a never alarms, b always: every draw ranks them
    ci = stats.bootstrap(
        (np.arange(4),),
        lambda d: correlations(x, suite.false_alarms(d))[1],
        n_resamples=300,
        vectorized=False,
        method="percentile",
        rng=np.random.default_rng(11),
    ).confidence_interval
    assert (rho.low, rho.high) == pytest.approx((ci.low, ci.high))


def test_disagreements_put_the_largest_gap_first() -> None:
    gaps = disagreements(GRID, suite_matrix(answers(), ["a", "b", "c"]))
    assert len(gaps) == 2 * len(CASES)
    assert gaps["gap"].abs().is_monotonic_decreasing
    row = gaps.set_index(["case", "form"]).loc[("c2", "faulty")]
    assert row["grid promises"] == pytest.approx((0.8 + 0.4 + 0.0) / 3)
    assert row["suite gives"] == pytest.approx(1 / 3) and row["right"] == "1/3"
    other = gaps.set_index(["case", "form"]).loc[("c4", "faulty")]  # detection, not naming
    assert other["grid promises"] == pytest.approx((1.0 + 0.5 + 0.8) / 3)
    assert other["suite gives"] == pytest.approx(2 / 3)
    twin = gaps.set_index(["case", "form"]).loc[("c4", "fixed")]
    assert twin["grid promises"] == pytest.approx(1 - 0.3) and twin["label"] == "healthy"


def test_grid_rates_are_the_full_grids_scores() -> None:
    rows = []
    for grid, truth, predicted, kind in [
        ("full", "lr_too_high", "lr_too_high", scores.KNOWN),
        ("full", "lr_too_high", "healthy", scores.KNOWN),
        ("full", "dead_units", "dead_units", scores.KNOWN),
        ("full", "healthy", "dead_units", scores.HEALTHY),
        ("classic", "lr_too_high", "healthy", scores.KNOWN),  # not the full grid: left out
    ]:
        rows.append(
            {"diagnoser": "a", "grid": grid, "every": 20, "truth": truth, "predicted": predicted,
             "kind": kind, "status": "ok", "level": "", "variant": truth}
        )  # fmt: skip
    rates = grid_rates(pd.DataFrame(rows)).loc["a"]
    assert rates["identification"] == pytest.approx(2 / 3)
    assert rates["false_alarms"] == 1.0
    assert rates["recall:lr_too_high"] == 0.5 and rates["recall:dead_units"] == 1.0


def test_grid_rates_read_back_from_a_results_directory() -> None:
    rates = grid_rates_from_results(REPO / "results")
    board = pd.read_csv(REPO / "results" / "leaderboard.csv", dtype=str)
    first = board.iloc[0]
    assert rates.loc[first["diagnoser"], "identification"] == float(
        first["identification"].split()[0]
    )
    assert rates.loc["always-healthy", "false_alarms"] == 0.0
    assert {f"recall:{label}" for label in ("lr_too_high", "dead_units")} <= set(rates.columns)


def test_baselines_are_the_shipped_constant_and_random_ones() -> None:
    assert is_baseline("always-healthy") and is_baseline("random")
    assert not is_baseline("rules")
