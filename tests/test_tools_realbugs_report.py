"""A diagnoser's results on the suite and the doctor's headline beside them
(faultbench.tools.realbugs_report)."""

from __future__ import annotations

import pytest

from faultbench.scoring import scores
from faultbench.tools.realbugs_report import (
    FAILED,
    NOT_HEALTHY,
    UNDECIDED,
    CaseResult,
    RealBugsReport,
    doctor_scores,
)


@pytest.mark.parametrize(
    ("form", "status", "predicted", "headline", "truth", "correct", "verdict", "doctor_right"),
    [
        ("faulty", "ok", "lr_too_high", "lr_too_high", "lr_too_high", True, NOT_HEALTHY, True),
        ("faulty", "ok", "healthy", "not healthy", "lr_too_high", False, NOT_HEALTHY, True),
        ("faulty", "ok", "healthy", "healthy", "lr_too_high", False, "healthy", False),
        ("fixed", "ok", "healthy", "undecided", "healthy", True, UNDECIDED, False),
        ("fixed", "ok", "dead_units", "dead_units", "healthy", False, NOT_HEALTHY, False),
        ("fixed", "timeout", "unknown", "", "healthy", False, FAILED, False),
    ],
    ids=["named", "overruled", "missed", "blind", "false-alarm", "timeout"],
)
def test_case_result_truth_and_headline(
    form: str,
    status: str,
    predicted: str,
    headline: str,
    truth: str,
    correct: bool,
    verdict: str,
    doctor_right: bool,
) -> None:
    r = CaseResult("c", "lr_too_high", form, "mlp", predicted, status, headline=headline)
    assert (r.truth, r.correct, r.headline_class, r.headline_correct) == (
        truth,
        correct,
        verdict,
        doctor_right,
    )


def test_doctor_scores_split_the_forms() -> None:
    results = [
        CaseResult(
            "c", "lr_too_high", "faulty", "mlp", "lr_too_high", "ok", headline="lr_too_high"
        ),
        CaseResult("c", "lr_too_high", "fixed", "mlp", "healthy", "ok", headline="undecided"),
        CaseResult("d", "dead_units", "faulty", "mlp", "healthy", "ok", headline="healthy"),
        CaseResult("d", "dead_units", "fixed", "mlp", "healthy", "ok", headline="healthy"),
    ]
    found = doctor_scores(results)
    assert (found["faulty_not_healthy"].hits, found["faulty_not_healthy"].n) == (1, 2)
    assert found["fixed_undecided"].hits == 1 and found["fixed_healthy"].hits == 1
    assert found["right"] == scores.wilson(2, 4)  # c faulty and d fixed


def test_scored_frame_is_in_the_grids_columns() -> None:
    report = RealBugsReport(
        "x",
        (),
        (
            CaseResult(
                "forum_xor_without_activation", "other_fault", "faulty", "mlp", "healthy", "ok"
            ),
            CaseResult(
                "forum_xor_without_activation", "other_fault", "fixed", "mlp", "healthy", "ok"
            ),
        ),
    )
    frame = report.scored_frame()
    assert list(frame.columns) == list(scores.COLUMNS)
    assert list(frame["kind"]) == [scores.HELDOUT, scores.HEALTHY]
    assert list(frame["truth"]) == ["other_fault", "healthy"]
