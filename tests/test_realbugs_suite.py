"""The suite's shape: what the issue asks it to cover, and what it dropped
(faultbench.realbugs.suite)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from conftest import CLASSIFIER_FAULTS
from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import FAULTS, HEALTHY, OTHER_FAULT, labels
from faultbench.realbugs import DROPPED, SUITE, all_cases, case_names, counts_by_label, get_case
from faultbench.realbugs.case import SOURCE_HOSTS


def test_at_least_thirty_cases_in_name_order() -> None:
    names = case_names()
    assert len(names) >= 30
    assert names == sorted(names) and len(set(names)) == len(names)


def test_every_known_fault_twice_and_eight_outside_the_nine() -> None:
    counted = Counter(case.label for case in all_cases())
    known = CLASSIFIER_FAULTS  # the nine the suite was built for (a language model's faults
    assert set(known) <= set(counted)  # joined later: causal_mask_missing has one case)
    assert min(counted[label] for label in known) >= 2, counted
    outside = [case for case in all_cases() if case.label not in known]
    assert len(outside) >= 8 and counted[OTHER_FAULT] >= 7
    assert set(counted) <= {*FAULTS.names(), OTHER_FAULT} and HEALTHY not in counted


def test_five_kinds_of_model_and_several_optimizers() -> None:
    kinds = {case.model for case in all_cases()}
    assert {"mlp", "cnn", "recurrent", "embedding", "transformer"} <= kinds
    optimizers = {case.optimizer for case in all_cases()}
    assert len(optimizers) >= 3
    assert all(hasattr(torch.optim, name) for name in optimizers)


def test_each_case_has_its_own_public_source() -> None:
    sources = [case.source for case in all_cases()]
    assert len(set(sources)) == len(sources), "two cases re-enact one report"
    assert all(source.startswith(SOURCE_HOSTS) for source in sources)


def test_counts_by_label_follow_the_labels_order_and_add_up() -> None:
    counts = counts_by_label()
    assert sum(counts.values()) == len(all_cases())
    order = labels()
    assert list(counts) == [label for label in order if label in counts]


def test_dropped_cases_name_their_source_and_reason_and_are_not_shipped() -> None:
    assert DROPPED, "the note lists the dropped cases"
    shipped = {case.source for case in all_cases()} | set(case_names())
    for dropped in DROPPED:
        assert dropped.source.startswith("https://") and dropped.why.strip()
        assert dropped.source not in shipped and dropped.name not in shipped
        assert dropped.why.startswith(("symptom did not reproduce", "fixed twin", "not eligible"))


def test_get_case_names_the_nearest_on_a_typo() -> None:
    assert get_case(case_names()[0]).name == case_names()[0]
    with pytest.raises(FaultbenchError, match="forum_xor_without_activation"):
        get_case("forum_xor_without_activations")


def test_the_suite_name_is_no_task() -> None:
    from faultbench.tasks.task import TASKS

    assert SUITE == "realbugs" and SUITE not in TASKS.names()
