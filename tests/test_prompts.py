"""The two shipped sequence tasks: numbers (tuned-on) and spelling (held out)."""

from __future__ import annotations

import pytest

from faultbench.datasets.prompts import LARGEST, numbers_examples, spelling_examples, words
from faultbench.faults.family import draw_design
from faultbench.tasks.task import get_task


@pytest.mark.parametrize(
    ("n", "written"),
    [
        (0, "zero"),
        (13, "thirteen"),
        (40, "forty"),
        (42, "forty two"),
        (300, "three hundred"),
        (305, "three hundred five"),
        (342, "three hundred forty two"),
        (999, "nine hundred ninety nine"),
    ],
)
def test_numbers_are_written_out(n: int, written: str) -> None:
    assert " ".join(words(n)) == written


def test_numbers_phrases_each_number_three_ways_and_units_are_endings() -> None:
    examples = numbers_examples()
    assert len(examples) == 3 * (LARGEST + 1)
    prompts = [p for p, a, u in examples if a == ("3", "4", "2")]
    assert prompts == [
        ("three", "hundred", "forty", "two", "="),
        ("write", "three", "hundred", "forty", "two", "="),
        ("in", "digits", "three", "hundred", "forty", "two", "="),
    ]
    assert {u for _, a, u in examples if a[-2:] == ("4", "2")} == {42}


def test_spelling_goes_the_other_way() -> None:
    assert (("say", "3", "4", "2", "->"), words(342), 342) in spelling_examples()


@pytest.mark.parametrize("name", ["numbers", "spelling"])
def test_the_tasks_build_without_truncation_and_decode(name: str) -> None:
    task = get_task(name)
    seq = task.sequences
    assert seq is not None and seq.truncated == 0
    assert task.defaults.architecture == "transformer" and task.defaults.steps <= 300
    decoded = seq.decode(task.X_train[0][: seq.length_train[0]])
    assert decoded[0] == "<bos>" and decoded[-1] == "<eos>"
    assert not set(seq.units_train.tolist()) & set(seq.units_val.tolist())
    assert "huge_inputs" in task.inapplicable and "dead_units" in task.inapplicable


@pytest.mark.parametrize("name", ["numbers", "spelling"])
def test_the_family_draws_transformers_within_the_issues_ranges(name: str) -> None:
    task = get_task(name)
    for seed in range(20):
        net = draw_design(task, seed).network
        assert net.architecture == "transformer" and 2 <= len(net.widths) <= 4
        assert len(set(net.widths)) == 1 and 64 <= net.widths[0] <= 128
        assert net.heads in (2, 4) and net.widths[0] % net.heads == 0
