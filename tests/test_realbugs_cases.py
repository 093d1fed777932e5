"""The reproduction test on the first half of the real-bug cases (faultbench.realbugs.cases);
the tests themselves are ``realbugs_reproduction``'s."""

from __future__ import annotations

import numpy as np
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
    train,
    trained,
)

pytestmark = FILTERS
#: Cases cheap enough (well under a second a form) to train twice for determinism.
CHEAP = (
    "aihwkit_simple_layer_zero_grad",
    "forum_xor_without_activation",
    "pytorch_mse_broadcast_shapes",
    "keras_linear_regression_nan_lr",
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "name" in metafunc.fixturenames:
        metafunc.parametrize("name", half(0))


@pytest.mark.parametrize("cheap", CHEAP)
def test_a_form_trains_to_the_same_trace_twice(cheap: str) -> None:
    for fixed in (False, True):
        again = train(cheap, fixed).trace
        np.testing.assert_array_equal(again.loss, trained(cheap, fixed).trace.loss)
