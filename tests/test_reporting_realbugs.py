"""The real-bug suite's files in results/ and its score columns
(faultbench.reporting.realbugs)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from faultbench.realbugs import all_cases
from faultbench.reporting.realbugs import (
    ANSWER_COLUMNS,
    COLUMNS,
    case_table,
    columns,
    fidelity_table,
    matrix,
    score_table,
    shares,
    write,
)
from faultbench.scoring import scores
from faultbench.tools.realbugs import CaseResult, RealBugsReport

ZERO_GRAD = "aihwkit_simple_layer_zero_grad"  # missing_zero_grad
LR = "keras_linear_regression_nan_lr"  # lr_too_high
XOR = "forum_xor_without_activation"  # other_fault
LABELS = {ZERO_GRAD: "missing_zero_grad", LR: "lr_too_high", XOR: "other_fault"}


def result(
    case: str, form: str, predicted: str, status: str = "ok", headline: str = ""
) -> CaseResult:
    return CaseResult(
        case, LABELS[case], form, "mlp", predicted, status, headline=headline or predicted
    )


def answers() -> pd.DataFrame:
    """Two diagnosers on three cases; every share below is counted by hand from this."""
    good = RealBugsReport(
        "good",
        (),
        (
            result(ZERO_GRAD, "faulty", "missing_zero_grad"),
            result(ZERO_GRAD, "fixed", "healthy"),
            result(LR, "faulty", "dead_units"),
            result(LR, "fixed", "healthy", headline="not healthy"),
            result(XOR, "faulty", "other_fault"),
            result(XOR, "fixed", "healthy"),
        ),
    )
    noisy = RealBugsReport(
        "noisy",
        (),
        (
            result(ZERO_GRAD, "faulty", "unknown", status="timeout"),
            result(ZERO_GRAD, "fixed", "lr_too_high"),
            result(LR, "faulty", "lr_too_high"),
            result(LR, "fixed", "unknown", status="error"),
            result(XOR, "faulty", "frozen_layer"),
            result(XOR, "fixed", "dead_units", headline="undecided"),
        ),
    )
    return pd.concat([good.answers_frame(), noisy.answers_frame()], ignore_index=True)


def hits(share: scores.Share) -> tuple[int, int]:
    return share.hits, share.n


def test_shares_count_each_form_as_the_grid_does() -> None:
    found = shares(answers())
    good, noisy = found["good"], found["noisy"]
    assert hits(good["real-bug identification"]) == (1, 2)
    assert hits(noisy["real-bug identification"]) == (1, 2)  # the timeout is a miss
    assert hits(good["real-bug out-of-list not healthy"]) == (1, 1)
    assert hits(good["real-bug out-of-list other_fault"]) == (1, 1)
    assert hits(noisy["real-bug out-of-list other_fault"]) == (0, 1)
    assert hits(good["real-bug false alarms"]) == (0, 3)
    assert hits(noisy["real-bug false alarms"]) == (2, 3)  # a failed answer alarms nobody
    # doctor: good is right on 5 of 6 (the LR twin's headline says not healthy); noisy on
    # its answered faulty forms only (LR, XOR): a timeout has no headline, "undecided" no verdict
    assert hits(good["real-bug doctor right"]) == (5, 6)
    assert hits(noisy["real-bug doctor right"]) == (2, 6)


def test_columns_are_cells_with_wilson_intervals() -> None:
    table = columns(answers())
    assert list(table.columns) == ["diagnoser", *COLUMNS]
    row = table.set_index("diagnoser").loc["good"]
    one_of_two = scores.wilson(1, 2)
    assert row["real-bug identification"] == (
        f"0.500 [{one_of_two.low:.2f}, {one_of_two.high:.2f}]"
    )


def test_score_table_holds_the_numbers_for_the_paper() -> None:
    table = score_table(answers()).set_index("diagnoser")
    assert table.loc["noisy", "false_alarms_hits"] == 2
    assert table.loc["noisy", "false_alarms_n"] == 3
    assert table.loc["noisy", "false_alarms_value"] == "0.667"
    assert table.loc["good", "out_of_list_other_fault_value"] == "1.000"


def test_matrix_marks_the_right_answers() -> None:
    table = matrix(answers()).set_index(["case", "form"])
    assert table.loc[(ZERO_GRAD, "faulty"), "good"] == "missing_zero_grad ✓"
    assert table.loc[(ZERO_GRAD, "faulty"), "noisy"] == "timeout"
    assert table.loc[(ZERO_GRAD, "faulty"), "right"] == "1/2"
    assert table.loc[(XOR, "fixed"), "right"] == "1/2"


def test_case_table_lists_every_shipped_case() -> None:
    table = case_table()
    assert list(table["case"]) == [c.name for c in all_cases()]
    assert table["source"].str.startswith("https://").all()
    assert list(table["kind"]) == [c.kind for c in all_cases()]
    assert list(table["faithful"]) == [c.faithful for c in all_cases()]


def test_files_are_written_with_the_same_bytes_twice(tmp_path: Path) -> None:
    first = write(answers(), tmp_path / "a")
    second = write(answers(), tmp_path / "b")
    assert [p.name for p in first] == [
        "realbugs.md",
        "realbugs.csv",
        "realbugs_faithful.csv",
        "realbugs_cases.csv",
        "realbugs_answers.csv",
    ]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes()
    written = pd.read_csv(tmp_path / "a" / "realbugs_answers.csv")
    assert tuple(written.columns) == ANSWER_COLUMNS  # no seconds: machine-independent
    text = (tmp_path / "a" / "realbugs.md").read_text()
    assert "## Dropped" in text and "## Fidelity" in text
    faithful = pd.read_csv(tmp_path / "a" / "realbugs_faithful.csv").set_index("diagnoser")
    # of the three cases answered, keras (lr_too_high) is the faithful one
    assert faithful.loc["good", "identification_n"] == 1
    assert faithful.loc["good", "identification_hits"] == 0  # it answered dead_units
    assert faithful.loc["noisy", "identification_hits"] == 1


def test_fidelity_table_says_what_stands_in_for_what() -> None:
    table = fidelity_table().set_index("case")
    assert table.loc[LR, "faithful"] == "yes" and table.loc[LR, "data"] == "own"
    assert table.loc[ZERO_GRAD, "model"].startswith("a digital nn.Linear")
    cases = {c.name: c for c in all_cases()}
    assert (table["faithful"] == "yes").sum() == sum(c.faithful for c in cases.values())
    assert table.loc["agcn_detached_adjacency", "observed"].startswith("no")


def test_columns_give_one_row_per_diagnoser_in_order() -> None:
    # the leaderboard's own real-bug columns are assembled from the result files
    # (faultbench.reporting.assemble); realbugs.md's table is this one
    table = columns(answers())
    assert list(table.columns) == ["diagnoser", *COLUMNS]
    assert list(table["diagnoser"]) == ["good", "noisy"]
    assert all(isinstance(v, str) and v for v in table.to_numpy().ravel())


@pytest.mark.parametrize("name", ["good", "noisy"])
def test_identification_matches_scores_on_the_same_frame(name: str) -> None:
    frame = answers()
    part = frame[frame["diagnoser"] == name]
    assert (
        shares(frame)[name]["real-bug identification"] == (scores.identification(part)["accuracy"])
    )
