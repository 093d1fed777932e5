"""The reproduction test on the second half of the real-bug cases (faultbench.realbugs.cases);
the tests themselves are ``realbugs_reproduction``'s."""

from __future__ import annotations

import pytest
from realbugs_reproduction import (  # noqa: F401 (collected here, on this half)
    FILTERS,
    half,
    test_faulty_form_shows_the_reported_symptom,
    test_fixed_twin_does_not_show_it,
    test_fixed_twin_is_healthy_by_the_benchmarks_bar,
    test_forms_record_every_step_of_the_declared_optimizer,
    test_forms_share_every_line_but_the_bug,
    test_probe_rebuilds_the_untrained_model,
    test_the_suite_builds_each_forms_probe_without_training,
)

pytestmark = FILTERS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "name" in metafunc.fixturenames:
        metafunc.parametrize("name", half(1))
