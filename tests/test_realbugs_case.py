"""A case's module and its symptom check (faultbench.realbugs.case)."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import labels
from faultbench.realbugs import OWN, Case, CaseRun, Reference, Symptom, kit
from faultbench.realbugs.case import CONSTANTS, SIGNALS, SourceCheck
from faultbench.training.trace import RunConfig, Trace

CONFIG = RunConfig("SGD", 0.1, 8, 20, 3, (4, 3), 15)


def trace(loss: list[float], **extra: object) -> Trace:
    n = len(loss)
    fields: dict[str, object] = {
        "loss": np.array(loss, dtype=float),
        "grad_norm": {},
        "update_ratio": {},
        "zero_grad_share": np.zeros(n),
        "inactive_share": np.zeros(n),
        "wait_seconds": np.full(n, 0.1),
        "compute_seconds": np.full(n, 0.3),
        "eval_steps": np.array([5, 10, 20]),
        "train_acc": np.array([0.5, 0.9, 0.95]),
        "val_acc": np.array([0.4, 0.8, 0.6]),
        "val_loss": np.array([1.0, 0.5, 0.7]),
    }
    fields.update(extra)
    return Trace(**fields)  # type: ignore[arg-type]


def value(signal: str, t: Trace, layer: str = "") -> float:
    return SIGNALS[signal][1](t, CONFIG, layer)


def test_signals_match_their_definitions_by_hand() -> None:
    loss = [4.0, 2.0] + [1.0] * 16 + [3.0, 3.0]  # 20 steps: tenths of 2
    t = trace(loss, weight_change={"fc": 0.25}, inactive_share=np.array([0.0, 1.0] * 10))
    assert value("final_val_acc", t) == 0.6
    assert value("final_train_acc", t) == 0.95
    assert value("train_val_gap", t) == pytest.approx(0.35)
    assert value("val_acc_drop", t) == pytest.approx(0.8 - 0.6)
    assert value("final_val_loss", t) == 0.7
    assert value("loss_ratio", t) == pytest.approx(3.0 / 3.0)  # (3+3)/2 over (4+2)/2
    assert value("min_loss", t) == 1.0
    assert value("nonfinite_loss", t) == 0.0
    assert value("wait_share", t) == pytest.approx(0.25)
    assert value("relu_inactive", t) == pytest.approx(0.5)
    assert value("weight_change", t, "fc") == 0.25
    assert math.isnan(value("weight_change", t, "other"))
    # rebound: last tenth's mean (3) over the lowest mean of a 1-step window (1)
    assert value("loss_rebound", t) == pytest.approx(3.0)


def test_signals_skip_what_is_not_finite() -> None:
    t = trace([1.0, math.nan, math.inf, 0.5], val_acc=np.array([0.3, 0.7, math.nan]))
    assert value("nonfinite_loss", t) == 0.5
    assert value("min_loss", t) == 0.5
    assert value("final_val_acc", t) == 0.7  # the last finite evaluation
    assert value("loss_ratio", t) == 0.5  # finite steps only: 0.5 over 1.0
    everything_nan = trace([math.nan, math.nan])
    assert math.isnan(value("loss_ratio", everything_nan))
    assert math.isnan(value("min_loss", everything_nan))


def test_symptom_compares_on_its_side_and_never_on_undefined() -> None:
    t = trace([1.0] * 10)
    assert Symptom("final_val_acc", below=0.7).shows(t, CONFIG)  # 0.6 < 0.7
    assert not Symptom("final_val_acc", below=0.6).shows(t, CONFIG)  # strict
    assert Symptom("train_val_gap", above=0.3).shows(t, CONFIG)
    assert not Symptom("weight_change", above=-1.0, layer="absent").shows(t, CONFIG)
    assert str(Symptom("final_val_acc", below=0.7)) == "final validation accuracy < 0.7"
    assert "of layer 'fc'" in str(Symptom("weight_change", below=1e-6, layer="fc"))


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"signal": "loss_dips"}, "unknown signal"),
        ({"signal": "loss_ratio"}, "exactly one"),
        ({"signal": "loss_ratio", "above": 1.0, "below": 0.5}, "exactly one"),
        ({"signal": "weight_change", "below": 1e-6}, "layer="),
    ],
    ids=["unknown-signal", "no-threshold", "two-thresholds", "no-layer"],
)
def test_symptom_refuses_a_malformed_check(kwargs: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Symptom(**kwargs)  # type: ignore[arg-type]


CHECK = SourceCheck(
    read="the issue thread and its accepted answer",
    label="matches: the head never receives a gradient step, a frozen layer",
    mechanism="matches: the optimizer built before the head was added",
)


def module(**overrides: object) -> types.ModuleType:
    mod = types.ModuleType("faultbench.realbugs.cases.example_bug")
    constants: dict[str, object] = {
        "SOURCE": "https://github.com/owner/repo/issues/1",
        "REPORTED": "The loss stays flat.",
        "DIAGNOSIS": "The optimizer was given no parameters of the head.",
        "LABEL": "frozen_layer",
        "MODEL": "mlp",
        "OPTIMIZER": "SGD",
        "DATA": "Generated blobs.",
        "SYMPTOM": Symptom("loss_ratio", above=0.9),
        "SEED": 0,
        "KIND": "multiclass",
        "REFERENCE": Reference(0.9, "a logistic regression on the same data"),
        "FIDELITY_DATA": OWN,
        "FIDELITY_MODEL": "stand-in: a small MLP for the reporter's ResNet",
        "FIDELITY_CODE": OWN,
        "REPORTED_EFFECT": "none given: the loss stays flat",
        "REENACTED_EFFECT": "the loss ends at 0.99 of its start",
        "OBSERVED": True,
        "SOURCE_CHECK": CHECK,
        "TWIN_DEPARTURES": (),
        "script": lambda fixed, **_: None,
    }
    constants.update(overrides)
    for key, val in constants.items():
        if val is not None:
            setattr(mod, key, val)
    return mod


def test_a_well_formed_module_is_a_case() -> None:
    case = Case.from_module(module(), labels())
    assert (case.name, case.label, case.model, case.seed) == (
        "example_bug",
        "frozen_layer",
        "mlp",
        0,
    )
    assert (case.kind, case.reference.score, case.observed) == ("multiclass", 0.9, True)
    assert not case.faithful  # the model is a stand-in
    own = Case.from_module(module(FIDELITY_MODEL=OWN), labels())
    assert own.faithful and own.fidelity == (OWN, OWN, OWN)


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"SOURCE": None}, "lacks \\['SOURCE'\\]"),
        ({"script": None}, "lacks \\['script'\\]"),
        ({"SOURCE": "https://example.com/post"}, "is not an address"),
        ({"SOURCE": "https://github.com/a b"}, "is not an address"),
        ({"LABEL": "healthy"}, "is not a fault label"),
        ({"LABEL": "exploding_gradients"}, "is not a fault label"),
        ({"MODEL": "gan"}, "MODEL 'gan'"),
        ({"SYMPTOM": "loss flat"}, "expected a Symptom"),
        ({"DIAGNOSIS": "  "}, "empty \\['diagnosis'\\]"),
        ({"KIND": "classification"}, "KIND 'classification' is not a task kind"),
        ({"REFERENCE": 0.9}, "expected a Reference"),
        ({"REFERENCE": Reference(1.5, "x")}, "score in \\(0, 1\\]"),
        ({"FIDELITY_DATA": "the reporter's"}, "FIDELITY_DATA"),
        ({"FIDELITY_CODE": "stand-in: "}, "FIDELITY_CODE"),
        ({"OBSERVED": "yes"}, "OBSERVED 'yes'"),
        ({"REPORTED_EFFECT": "the loss stays flat"}, "REPORTED_EFFECT .* gives no number"),
        ({"REENACTED_EFFECT": "flat"}, "REENACTED_EFFECT 'flat' gives no number"),
        ({"KIND": None}, "lacks \\['KIND'\\]"),
    ],
    ids=[
        "no-source",
        "no-script",
        "other-host",
        "space",
        "healthy",
        "unknown-label",
        "kind",
        "symptom-text",
        "empty-diagnosis",
        "unknown-kind",
        "reference-number",
        "reference-above-one",
        "fidelity-words",
        "stand-in-empty",
        "observed-text",
        "reported-no-number",
        "reenacted-no-number",
        "no-kind",
    ],
)
def test_a_malformed_module_is_refused(overrides: dict[str, object], why: str) -> None:
    with pytest.raises(FaultbenchError, match=why):
        Case.from_module(module(**overrides), labels())


def test_every_constant_is_documented() -> None:
    assert list(CONSTANTS) == [
        "SOURCE",
        "REPORTED",
        "DIAGNOSIS",
        "LABEL",
        "MODEL",
        "OPTIMIZER",
        "DATA",
        "SYMPTOM",
        "SEED",
        "KIND",
        "REFERENCE",
        "FIDELITY_DATA",
        "FIDELITY_MODEL",
        "FIDELITY_CODE",
        "REPORTED_EFFECT",
        "REENACTED_EFFECT",
        "OBSERVED",
        "SOURCE_CHECK",
        "TWIN_DEPARTURES",
    ]


def healthy_run(loss: list[float], val: float) -> CaseRun:
    t = trace(loss, val_acc=np.array([val]), eval_steps=np.array([len(loss)]))
    return CaseRun(t, CONFIG, None)  # type: ignore[arg-type]


def test_a_twin_is_held_to_the_grids_healthy_bar_against_its_reference() -> None:
    case = Case.from_module(module(), labels())  # reference 0.9: the bar is 0.81
    falling = [2.0] * 10 + [1.0] * 80 + [0.5] * 10  # last tenth 0.5 < 0.8 x first tenth 2.0
    assert case.twin_verdict(healthy_run(falling, 0.85)) == ""
    assert "validation accuracy 0.800" in case.twin_verdict(healthy_run(falling, 0.80))
    flat = [2.0] * 10 + [1.0] * 80 + [1.7] * 10  # 1.7 is not below 1.6
    assert "did not fall" in case.twin_verdict(healthy_run(flat, 0.99))
    broken = [*falling[:-1], math.nan]
    assert "not finite" in case.twin_verdict(healthy_run(broken, 0.99))


def test_the_digits_reference_is_what_logistic_regression_scores() -> None:
    """kit.DIGITS_REFERENCE, measured again: scikit-learn on kit.digits' split."""
    from sklearn.linear_model import LogisticRegression

    X_train, y_train, X_val, y_val = (t.numpy() for t in kit.digits(seed=0))
    score = LogisticRegression(max_iter=5000).fit(X_train, y_train).score(X_val, y_val)
    assert score == pytest.approx(kit.DIGITS_REFERENCE.score, abs=5e-4)
