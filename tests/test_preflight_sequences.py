"""Preflight on a sequence task: the data phase shows the loss's tokens, fails on wrong masks."""

from __future__ import annotations

import pytest

from faultbench.faults.fault import condition
from faultbench.tools.preflight import pilot_for_task, preflight


@pytest.fixture(scope="module")
def healthy_report():  # type: ignore[no-untyped-def]
    return preflight(pilot_for_task("numbers"))


def test_a_healthy_sequence_pilot_passes_every_gate(healthy_report) -> None:  # type: ignore[no-untyped-def]
    report = healthy_report
    assert report.passed, str(report)
    data = report.phases[0]
    assert "lengths 5-12 of 12" in data.detail and "0 truncated" in data.detail
    assert "none counted" in data.detail


def test_the_decoded_examples_mark_the_answer_tokens(healthy_report) -> None:  # type: ignore[no-untyped-def]
    report = healthy_report
    assert len(report.examples) == 3
    for line in report.examples:
        tokens = line.split("  (")[0].split()
        marked = [t for t in tokens if t.startswith("[")]
        assert tokens[0] == "<bos>" and marked[-1] == "[<eos>]"
        # The answer follows "=": every token after it is marked, none before it.
        at = tokens.index("=")
        assert all(t.startswith("[") for t in tokens[at + 1 :])
        assert not any(t.startswith("[") for t in tokens[: at + 1])
    assert "[token]: a target that counts in the loss" in str(report)


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("unmasked_loss", "padding counts in the loss"),
        ("unmasked_loss.prompt", "the prompt counts in the loss"),
    ],
)
def test_the_data_phase_fails_when_the_loss_counts_what_it_should_not(
    fault: str, message: str
) -> None:
    pilot = pilot_for_task("numbers", condition(fault))
    report = preflight(pilot)
    assert report.failed[0] == "data" and message in report.phases[0].detail
    assert any("[<pad>]" in line or "[=]" in line for line in report.examples)


def test_an_example_without_a_counted_token_fails() -> None:
    import dataclasses

    pilot = pilot_for_task("spelling")
    labels = pilot.y_train.clone()
    labels[:5] = -100
    report = preflight(dataclasses.replace(pilot, y_train=labels))
    assert "5 of 1600 examples have no token counted in the loss" in report.phases[0].detail
