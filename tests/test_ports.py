"""The ports of the published diagnosers: every rule fires on its symptom and is silent on health.

Rules are pinned on hand-made traces, configurations and tiny probes
(``ports_fixtures``); the ports as a whole answer on real digits runs with the rule that
decided named in their evidence. (They pass the conformance checks in ``test_checks.py``,
with every shipped diagnoser.)
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from ports_fixtures import (
    CLASSES,
    EVALS,
    STEPS,
    config,
    healthy_trace,
    per_step,
    run,
    tiny_model,
    tiny_probe,
)
from torch import nn

from conftest import DIGITS_CONDITIONS
from faultbench.diagnosers import _deepchecker as dc
from faultbench.diagnosers import _published as pub
from faultbench.diagnosers import autotrainer as at
from faultbench.diagnosers import deepdiagnosis as dd
from faultbench.diagnosers import thedeepchecker as tdc
from faultbench.diagnosers import umlaut as um
from faultbench.faults.fault import condition_names
from faultbench.scoring import diagnosis as diagnosis_module
from faultbench.scoring.diagnosis import UNKNOWN, diagnoser_names, get_diagnoser
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.harness import diagnose_safely
from faultbench.tasks.task import get_task

PORTS = ("autotrainer", "deepdiagnosis", "umlaut", "thedeepchecker")
RULES = {
    "autotrainer": at.RULES,
    "deepdiagnosis": dd.RULES,
    "umlaut": um.RULES,
    "thedeepchecker": tdc.RULES,
}
PORT_MODULES = {"autotrainer": at, "deepdiagnosis": dd, "umlaut": um, "thedeepchecker": tdc}
TABLES = {
    "autotrainer": at.SYMPTOMS,
    "deepdiagnosis": dd.SYMPTOMS,
    "umlaut": um.SYMPTOMS,
    "thedeepchecker": tdc.SYMPTOMS,
}


def _case(id_: str, *values: Any) -> Any:
    return pytest.param(*values, id=id_)


# -- what every port shares --------------------------------------------------------------


@pytest.mark.parametrize("name", PORTS)
def test_port_is_registered_with_published_defaults(name: str) -> None:
    diagnoser = get_diagnoser(name)
    assert name in diagnoser_names()
    assert diagnoser.tuned_on == frozenset()
    assert diagnoser.probes is True


@pytest.mark.parametrize("name", PORTS)
def test_table_maps_every_symptom_to_a_label(name: str) -> None:
    table = TABLES[name]
    assert table[pub.NO_SYMPTOM] == "healthy"
    assert set(table.values()) <= {*condition_names(), pub.OTHER_FAULT}


def _doc_row(key: str, label: str | None) -> str:
    return f"| `{key}` | " + (f"`{label}` |" if label is not None else "(the symptom decides) |")


@pytest.mark.parametrize("name", PORTS)
def test_docs_show_the_table_as_the_module_holds_it(name: str) -> None:
    doc = (Path(__file__).parents[1] / "docs" / "ports.md").read_text()
    tables: list[dict[str, str | None]] = [dict(TABLES[name])]
    if name == "deepdiagnosis":
        tables.append(dict(dd.FIXES))
    missing = [_doc_row(k, v) for t in tables for k, v in t.items() if _doc_row(k, v) not in doc]
    assert not missing


def test_deepdiagnosis_fixes_name_labels_or_defer_to_the_symptom() -> None:
    assert {v for v in dd.FIXES.values() if v is not None} <= {*condition_names(), pub.OTHER_FAULT}


def test_epochs_are_the_evaluation_intervals() -> None:
    trace = healthy_trace(loss=np.arange(STEPS, dtype=float))
    h = pub.epochs(trace)
    width = STEPS // EVALS
    expected = [np.mean(np.arange(e * width, (e + 1) * width)) for e in range(EVALS)]
    np.testing.assert_allclose(h.loss, expected)
    assert len(h) == EVALS and len(h.upto(2)) == 3


def test_other_fault_stands_in_as_unknown_until_the_label_exists(monkeypatch) -> None:
    table = {"x": pub.OTHER_FAULT}
    now = pub.answer(table, "x", rule="r", fired=["r"], evidence={})
    assert now.evidence["table_label"] == pub.OTHER_FAULT
    assert now.label == (pub.OTHER_FAULT if pub.label_accepted(pub.OTHER_FAULT) else UNKNOWN)
    monkeypatch.setattr(diagnosis_module, "OTHER_FAULT", pub.OTHER_FAULT, raising=False)
    assert pub.answer(table, "x", rule="r", fired=["r"], evidence={}).label == pub.OTHER_FAULT


def test_per_module_series_are_read_at_a_step_where_they_were_recorded() -> None:
    trace = healthy_trace(grad_mean_abs={"hidden": np.arange(STEPS, dtype=float)})
    series = pub.module_stat(trace, pub.GRAD_MEAN_ABS, "hidden")
    assert series is not None and pub.value_at(trace, series, 60) == 59.0
    assert pub.module_stat(healthy_trace(), pub.GRAD_MEAN_ABS, "hidden") is None
    every = healthy_trace(
        stat_steps=np.arange(0, STEPS, 20, dtype=float),
        grad_mean_abs={"hidden": np.arange(STEPS // 20, dtype=float)},
    )  # recorded after steps 1, 21, 41, 61, ...: step 60 reads the one after step 41
    series = pub.module_stat(every, pub.GRAD_MEAN_ABS, "hidden")
    assert series is not None and pub.value_at(every, series, 60) == 2.0


# -- AUTOTRAINER -------------------------------------------------------------------------

HEALTHY_INTERNALS = at.Internals(
    kernel_norms=(0.5, 0.4),
    zero_share=0.05,
    grads_finite=True,
    max_row_sum=3.0,
    layer_mean_abs={"hidden": 0.8, "relu": 0.4},
)


def _internals(**changes: Any) -> at.Internals:
    return dataclasses.replace(HEALTHY_INTERNALS, **changes)


def _history(**trace_changes: Any) -> pub.Epochs:
    return pub.epochs(healthy_trace(**trace_changes))


ALTERNATING = np.tile([0.8, 0.9], EVALS // 2)
AUTOTRAINER_HISTORY = [
    _case("nan_loss", at.nan_loss, {"val_loss": np.r_[np.ones(EVALS - 1), math.nan]}),
    _case("nan_loss-large", at.nan_loss, {"loss": per_step(2e3)}),
    _case("abnormal_loss", at.abnormal_loss, {"loss": per_step(-0.5)}),
    _case("unstable_loss", at.unstable_loss, {"train_acc": ALTERNATING}),
    _case("not_converge", at.not_converge, {"train_acc": np.full(EVALS, 0.6)}),
    _case("slow_convergence", at.slow_convergence, {"train_acc": np.full(EVALS, 0.9)}),
]


@pytest.mark.parametrize(("rule", "symptom"), AUTOTRAINER_HISTORY)
def test_autotrainer_history_rule_fires_on_its_symptom(rule: Callable, symptom: dict) -> None:
    if rule is at.slow_convergence:
        symptom = {**symptom, "val_acc": np.full(EVALS, 0.9)}
    if rule is at.not_converge:
        symptom = {**symptom, "val_acc": np.full(EVALS, 0.5)}
    assert rule(_history(**symptom)).fired


@pytest.mark.parametrize(("rule", "symptom"), AUTOTRAINER_HISTORY)
def test_autotrainer_history_rule_silent_on_healthy(rule: Callable, symptom: dict) -> None:
    assert not rule(_history()).fired


AUTOTRAINER_INTERNALS = [
    _case("vanishing_gradient", at.vanishing_gradient, {"kernel_norms": (5e-5, 1.0)}),
    _case("exploding_gradient", at.exploding_gradient, {"kernel_norms": (80.0, 1.0)}),
    _case("dying_relu", at.dying_relu, {"zero_share": 0.7}),
    _case("nan_gradient", at.nan_gradient, {"grads_finite": False}),
    _case("output_activation", at.output_activation, {"max_row_sum": 1.0}),
    _case("output_activation-nan", at.output_activation, {"max_row_sum": math.nan}),
    _case("abnormal_output", at.abnormal_output, {"layer_mean_abs": {"hidden": 10.0}}),
]


@pytest.mark.parametrize(("rule", "symptom"), AUTOTRAINER_INTERNALS)
def test_autotrainer_gradient_and_output_rule_fires(rule: Callable, symptom: dict) -> None:
    assert rule(_internals(**symptom)).fired


@pytest.mark.parametrize(("rule", "symptom"), AUTOTRAINER_INTERNALS)
def test_autotrainer_gradient_and_output_rule_silent_on_healthy(rule: Callable, symptom) -> None:
    assert not rule(HEALTHY_INTERNALS).fired


def test_autotrainer_nan_weight_reads_the_final_weights() -> None:
    assert not at.nan_weight(run()).fired
    broken = healthy_trace(weight_change={"hidden": math.nan, "output": 0.5})
    assert at.nan_weight(run(broken)).evidence["nonfinite_layers"] == ["hidden"]


def test_autotrainer_internals_match_an_independent_computation() -> None:
    probe = tiny_probe(tiny_model(he=False))
    found = at.internals(run(probe=probe))
    assert found is not None and probe.steps_used == 1
    model = tiny_model(he=False)
    X, y = probe.train_data(config().batch_size)
    hidden = model.hidden(X)
    out = model.output(torch.relu(hidden))
    F.cross_entropy(out, y).backward()
    hidden, out = hidden.detach(), out.detach()
    grads = [p.grad for p in model.parameters()]
    assert found.zero_share == pytest.approx(
        sum(int((g == 0).sum()) for g in grads) / sum(g.numel() for g in grads)
    )
    assert found.kernel_norms == pytest.approx(
        (float(model.hidden.weight.grad.norm()), float(model.output.weight.grad.norm()))
    )
    assert found.max_row_sum == pytest.approx(float(out.abs().sum(dim=1).max()), rel=1e-6)
    assert found.layer_mean_abs["hidden"] == pytest.approx(float(hidden.abs().mean()), rel=1e-6)


AUTOTRAINER_PROBLEMS = [
    _case("healthy", {}, {}, "no symptom"),
    _case("relu", {"zero_share": 0.8}, {}, "relu"),
    _case("explode", {"kernel_norms": (100.0, 1.0)}, {}, "explode"),
    _case("vanish", {"kernel_norms": (1e-5, 1.0)}, {}, "vanish"),
    _case(
        "abnormal_data-first",
        {"layer_mean_abs": {"h": 50.0}, "zero_share": 0.8},
        {},
        "abnormal_data",
    ),
    _case("activation_issue", {"max_row_sum": 1.0}, {}, "activation_issue"),
    _case(
        "explode-nan",
        {"grads_finite": False},
        {"val_loss": np.r_[1.0, 1.0, math.nan, np.ones(EVALS - 3)]},
        "explode",
    ),
    _case("unstable", {}, {"train_acc": ALTERNATING, "val_acc": ALTERNATING}, "unstable"),
    _case(
        "not_converge",
        {},
        {"train_acc": np.full(EVALS, 0.3), "val_acc": np.full(EVALS, 0.3)},
        "not_converge",
    ),
]


@pytest.mark.parametrize(("internals", "history", "problem"), AUTOTRAINER_PROBLEMS)
def test_autotrainer_reports_its_problem_with_its_label(
    monkeypatch, internals: dict, history: dict, problem: str
) -> None:
    monkeypatch.setattr(at, "internals", lambda _run: _internals(**internals))
    answer = get_diagnoser("autotrainer").diagnose(run(healthy_trace(**history)))
    assert answer.evidence["symptom"] == problem
    assert answer.evidence["table_label"] == at.SYMPTOMS[problem]


def test_autotrainer_raises_slow_convergence_at_its_first_check_as_published(monkeypatch) -> None:
    # One epoch of history has no gain, so the published monitor flags it at epoch 0
    # and the flag stays: the judge then runs at epoch 3 on every run.
    monkeypatch.setattr(at, "internals", lambda _run: _internals(zero_share=0.8))
    answer = get_diagnoser("autotrainer").diagnose(run())
    assert "slow_convergence" in answer.evidence["fired"] and answer.evidence["epoch"] == 3


def test_autotrainer_keeps_not_converging_raised_from_the_first_epoch_as_published(monkeypatch):
    monkeypatch.setattr(at, "internals", lambda _run: HEALTHY_INTERNALS)
    slow_start = np.r_[0.6, np.full(EVALS - 1, 0.95)]
    answer = get_diagnoser("autotrainer").diagnose(
        run(healthy_trace(train_acc=slow_start, val_acc=slow_start))
    )
    assert (answer.evidence["symptom"], answer.evidence["epoch"]) == ("not_converge", 3)


# -- DeepDiagnosis -----------------------------------------------------------------------


def _dd_context(
    trace: Any = None,
    *,
    model: nn.Module | None = None,
    batch_changes: dict[str, dict[str, np.ndarray]] | None = None,
    outside: bool = False,
    **config_changes: Any,
) -> dd.Context:
    """A context over the tiny probe's first batch, with some arrays replaced."""
    r = run(trace, tiny_probe(model), **config_changes)
    ctx = dd.context(r)
    assert ctx.batch is not None
    batch = ctx.batch
    for part, arrays in (batch_changes or {}).items():
        batch = dataclasses.replace(batch, **{part: {**getattr(batch, part), **arrays}})
    return dataclasses.replace(ctx, batch=batch, inputs_outside=outside)


def _first_symptom(ctx: dd.Context) -> tuple[int, dd.Symptom] | None:
    return next(dd.symptoms(ctx, []), None)


def _stats(**stat_overrides: dict[str, float]) -> dict[str, dict[str, np.ndarray]]:
    """The Monitor's activation-module series (trace fields), with some values changed."""
    fields: dict[str, dict[str, np.ndarray]] = {
        "activation_mean_abs": {"relu": per_step(0.5), "sigmoid": per_step(0.5)},
        "nonpositive_share": {"relu": per_step(0.3)},
        "saturated_share": {"sigmoid": per_step(0.1)},
    }
    for module, values in stat_overrides.items():
        for stat, value in values.items():
            fields[pub.ACTIVATION_STATS[stat]][module] = per_step(value)
    return fields


LONG = {  # twenty epochs, for the accuracy check's FRQ = 20
    "loss": np.linspace(1.1, 0.2, 2 * STEPS),
    "eval_steps": np.arange(1, 21) * (STEPS // EVALS),
    "train_acc": np.full(20, 0.75),  # exact in binary: the published check compares exactly
    "val_acc": np.linspace(0.4, 0.8, 20),
    "val_loss": np.linspace(1.0, 0.3, 20),
    "update_ratio": {k: np.full(2 * STEPS, 1e-3) for k in ("hidden", "output")},
}
SIGMOID_MODEL = nn.Sequential(
    OrderedDict(hidden=nn.Linear(4, 8), sigmoid=nn.Sigmoid(), output=nn.Linear(8, CLASSES))
)
DEEPDIAGNOSIS_SYMPTOMS = [
    _case("out of range", {"model": tiny_model(softmax=True)}, "out of range", 0),
    _case(
        "numerical error in forward",
        {"batch_changes": {"outputs": {"relu": np.zeros((12, 8))}}},
        "numerical error in forward",
        0,
    ),
    _case(
        "dead node",
        {"trace": healthy_trace(**_stats(relu={"nonpositive_share": 0.8}))},
        "dead node",
        EVALS - 1,
    ),
    _case(
        "saturated activation",
        {
            "model": SIGMOID_MODEL,
            "trace": healthy_trace(**_stats(sigmoid={"saturated_share": 0.6})),
        },
        "saturated activation",
        4,
    ),
    _case(
        "unchanged forward",
        {"trace": healthy_trace(update_ratio={"hidden": per_step(0.0), "output": per_step(1e-3)})},
        "unchanged forward",
        4,
    ),
    _case(
        "invalid loss",
        {"trace": healthy_trace(loss=np.r_[np.ones(130), math.nan, np.ones(STEPS - 131)])},
        "invalid loss",
        2,
    ),
    _case(
        "loss not decreasing",
        {"trace": healthy_trace(loss=per_step(1.0))},
        "loss not decreasing",
        4,
    ),
    _case(
        "invalid accuracy",
        {"trace": healthy_trace(train_acc=np.r_[0.5, 0.6, 0.7, 0.0, np.full(EVALS - 4, 0.8)])},
        "invalid accuracy",
        3,
    ),
    _case(
        "accuracy not increasing", {"trace": healthy_trace(**LONG)}, "accuracy not increasing", 19
    ),
    _case(
        "numerical error in gradients",
        {"batch_changes": {"grads": {"output.weight": np.zeros((CLASSES, 8))}}},
        "numerical error in gradients",
        0,
    ),
    _case(
        "vanishing gradient",
        {"batch_changes": {"grads": {"hidden.weight": np.full((8, 4), 1e-9)}}},
        "vanishing gradient",
        0,
    ),
    _case(
        "numerical error in weights",
        {"trace": healthy_trace(weight_change={"hidden": math.nan, "output": 0.5})},
        "numerical error in weights",
        EVALS - 1,
    ),
    _case(
        "unchanged weights",
        {"trace": healthy_trace(update_ratio={"hidden": per_step(1e-3), "output": per_step(0.0)})},
        "unchanged weights",
        4,
    ),
]


@pytest.mark.parametrize(("context", "symptom", "epoch"), DEEPDIAGNOSIS_SYMPTOMS)
def test_deepdiagnosis_check_fires_first_on_its_symptom(
    context: dict, symptom: str, epoch: int
) -> None:
    found = _first_symptom(_dd_context(**context))
    assert found is not None and (found[1].name, found[0]) == (symptom, epoch)


def test_deepdiagnosis_silent_on_healthy() -> None:
    assert _first_symptom(_dd_context(healthy_trace(**_stats()))) is None
    assert _first_symptom(_dd_context()) is None


def test_deepdiagnosis_unchanged_gradients_when_nothing_moves() -> None:
    frozen = healthy_trace(update_ratio={"hidden": per_step(0.0), "output": per_step(0.0)})
    found = list(dd.unchanged_checks(_dd_context(frozen), 4, []))
    assert [s.name for s in found][:2] == ["unchanged gradients", "unchanged weights"]
    assert not list(dd.unchanged_checks(_dd_context(), 4, []))


def test_deepdiagnosis_later_epochs_read_the_monitors_series() -> None:
    missing: list[str] = []
    list(dd.symptoms(_dd_context(), missing))
    assert "nonpositive_share[relu]" in missing
    assert f"{pub.GRAD_MEAN_ABS}[hidden]" in missing
    with_fields: list[str] = []
    trace = healthy_trace(
        **_stats(), grad_mean_abs={k: per_step(1e-3) for k in ("hidden", "output")}
    )
    list(dd.symptoms(_dd_context(trace), with_fields))
    # The Monitor records output statistics of activation modules only: the linear layers'
    # own output means are the one thing left unread.
    assert set(with_fields) == {"activation_mean_abs[hidden]", "activation_mean_abs[output]"}


def test_deepdiagnosis_reads_a_sparse_trace_at_its_recorded_steps() -> None:
    every = 20
    recorded = np.arange(0, STEPS, every)
    sparse = healthy_trace(
        stat_steps=recorded.astype(float),
        update_ratio={k: np.full(len(recorded), 1e-3) for k in ("hidden", "output")},
    )
    # Epochs end every 60 steps: three recorded updates each, all moving.
    assert dd.unmoved(_dd_context(sparse), 4, ["hidden"]) is False
    assert not list(dd.unchanged_checks(_dd_context(sparse), 4, []))
    sparser = healthy_trace(
        stat_steps=np.array([0.0, 300.0]),
        update_ratio={k: np.full(2, 1e-3) for k in ("hidden", "output")},
    )
    missing: list[str] = []
    assert not list(dd.unchanged_checks(_dd_context(sparser), 4, missing))  # no update recorded
    assert missing and all(m.startswith("update_ratio for unchanged") for m in missing)


DEEPDIAGNOSIS_FIXES = [
    _case("normalize the data", {"outside": True}, "dead", "normalize the data"),
    _case(
        "poor weight initialization",
        {"batch_changes": {"params": {"hidden.weight": np.full((8, 4), 0.1)}}},
        "dead",
        "poor weight initialization",
    ),
    _case("learning rate high", {"lr": 1e3}, "dead", "learning rate (ratio above 1e-1)"),
    _case("learning rate low", {"lr": 1e-12}, "dead", "learning rate (ratio below 1e-5)"),
    _case("last resort", {}, "dead", "add dropout or a missing activation"),
    _case("unchanged: optimizer", {}, "unchanged W/DW", "change the optimizer"),
    _case("vanishing: layers", {}, "vanishing", "add or delete layers, or change the sigmoid"),
    _case(
        "invalid accuracy: output",
        {"model": tiny_model(softmax=True)},
        "accuracy invalid",
        "change the output activation",
    ),
]


@pytest.mark.parametrize(("context", "analysis", "fix"), DEEPDIAGNOSIS_FIXES)
def test_deepdiagnosis_recommends_its_fix(context: dict, analysis: str, fix: str) -> None:
    assert dd.recommend(_dd_context(**context), analysis, 1) == fix


def test_deepdiagnosis_learning_rate_ratio_matches_an_independent_computation() -> None:
    ctx = _dd_context()
    model = tiny_model()
    X, y = tiny_probe().train_data(config().batch_size)
    F.cross_entropy(model(X), y).backward()
    weight = model.hidden.weight.detach()
    expected = 1e-3 * float(model.hidden.weight.grad.norm()) / float(weight.norm())
    assert dd.lr_ratios(ctx)["hidden"] == pytest.approx(expected, rel=1e-6)


def test_deepdiagnosis_answers_the_fix_label_before_the_symptom_label() -> None:
    dead = healthy_trace(**_stats(relu={"nonpositive_share": 0.9}))
    answer = get_diagnoser("deepdiagnosis").diagnose(run(dead, tiny_probe(scale=3.0)))
    assert answer.evidence["rule"] == "dead node"
    assert (answer.evidence["fix"], answer.label) == ("normalize the data", "huge_inputs")
    answer = get_diagnoser("deepdiagnosis").diagnose(run(dead, tiny_probe(scale=0.25)))
    assert answer.label == "dead_units"


# -- UMLAUT ------------------------------------------------------------------------------

BARE = nn.Sequential(OrderedDict(a=nn.Linear(4, 8), b=nn.Linear(8, 3)))
RELU_OUT = nn.Sequential(
    OrderedDict(a=nn.Linear(4, 8), r=nn.ReLU(), b=nn.Linear(8, 3), out=nn.ReLU())
)
DROPPY = nn.Sequential(
    OrderedDict(a=nn.Linear(4, 8), r=nn.ReLU(), d=nn.Dropout(0.6), b=nn.Linear(8, 3))
)
UMLAUT_STRUCTURE = [
    _case("no softmax", lambda m: um.no_softmax(pub.leaves(m), logits=False), tiny_model()),
    _case("missing activation", lambda m: um.missing_activation(pub.leaves(m)), BARE),
    _case("final layer activation", lambda m: um.final_layer_activation(pub.leaves(m)), RELU_OUT),
    _case("high dropout", lambda m: um.high_dropout(pub.leaves(m)), DROPPY),
]


@pytest.mark.parametrize(("check", "model"), UMLAUT_STRUCTURE)
def test_umlaut_structure_check_fires_on_its_model(check: Callable, model: nn.Module) -> None:
    assert check(model).fired


@pytest.mark.parametrize(("check", "model"), UMLAUT_STRUCTURE)
def test_umlaut_structure_check_silent_on_a_healthy_model(check: Callable, model) -> None:
    healthy = tiny_model()
    if check is UMLAUT_STRUCTURE[0].values[0]:
        assert not um.no_softmax(pub.leaves(healthy), logits=True).fired
        assert not um.no_softmax(pub.leaves(tiny_model(softmax=True)), logits=False).fired
    else:
        assert not check(healthy).fired


def test_umlaut_reads_from_logits_off_the_loss() -> None:
    assert um.takes_logits(tiny_probe(), CLASSES)
    nll = tiny_probe()
    nll._loss_fn = F.nll_loss
    assert not um.takes_logits(nll, CLASSES)


X_OK = torch.zeros(4, 4)
UMLAUT_EPOCH = [
    _case("input shape", lambda r, h: um.input_shape(torch.zeros(2, 1, 3, 5)), {}),
    _case(
        "input not normalized",
        lambda r, h: um.input_not_normalized(r),
        {"input_stats": {"abs_max": 1.5}},
    ),
    _case(
        "input not floating",
        lambda r, h: um.input_not_floating(torch.zeros(2, 4, dtype=torch.long)),
        {},
    ),
    _case("nan in input", lambda r, h: um.nan_in_input(math.nan, torch.full((2, 2), math.nan)), {}),
    _case("learning rate high", lambda r, h: um.learning_rate(r)[0], {"lr": 0.02}),
    _case("learning rate low", lambda r, h: um.learning_rate(r)[1], {"lr": 1e-8}),
    _case(
        "overfitting",
        lambda r, h: um.overfitting(h, 5),
        {"val_loss": np.r_[np.linspace(1, 0.5, 5), 0.9, np.full(EVALS - 6, 0.4)]},
    ),
    _case(
        "overconfident validation",
        lambda r, h: um.overconfident_validation(h, 5),
        {"val_acc": np.full(EVALS, 0.96)},
    ),
]


@pytest.mark.parametrize(("check", "symptom"), UMLAUT_EPOCH)
def test_umlaut_epoch_check_fires_on_its_symptom(check: Callable, symptom: dict) -> None:
    lr = symptom.pop("lr", 1e-3) if "lr" in symptom else 1e-3
    trace = healthy_trace(**symptom)
    assert check(run(trace, lr=lr), pub.epochs(trace)).fired


@pytest.mark.parametrize(("check", "symptom"), UMLAUT_EPOCH)
def test_umlaut_epoch_check_silent_on_healthy(check: Callable, symptom: dict) -> None:
    r, h = run(), pub.epochs(healthy_trace())
    silent = {
        "input shape": um.input_shape(torch.zeros(2, 1, 3, 3)),
        "input not floating": um.input_not_floating(X_OK),
        "nan in input": um.nan_in_input(math.nan, X_OK),
    }
    name = next(n for n, c in ((p.id, p.values[0]) for p in UMLAUT_EPOCH) if c is check)
    assert not silent.get(name, check(r, h)).fired


def test_umlaut_answers_its_first_warning_and_lists_them_all() -> None:
    umlaut = get_diagnoser("umlaut")
    assert umlaut.diagnose(run(probe=tiny_probe())).label == "healthy"
    noisy = healthy_trace(input_stats={"abs_max": 4.0})
    answer = umlaut.diagnose(run(noisy, tiny_probe(), lr=0.05))
    assert answer.evidence["fired"][:2] == ["input not normalized", "learning rate high"]
    assert answer.label == "huge_inputs" and answer.evidence["when"] == "epoch 0"


# -- TheDeepChecker ----------------------------------------------------------------------

RNG = np.random.default_rng(0)
STANDARD = RNG.standard_normal((200, 4))
STANDARD = (STANDARD - STANDARD.mean()) / STANDARD.std()
HE = {"w": RNG.standard_normal((64, 32)) * math.sqrt(2 / 32)}
BALANCED = np.arange(300) % 3
LEARNING = np.geomspace(2.0, 0.05, 20)


def _alerts(found: list[dc.Alert]) -> list[str]:
    return [key for key, _ in found]


TDC_PRE = [
    _case("features_constant", lambda x: dc.check_features(x), np.ones((10, 4)), STANDARD),
    _case("features_unnormalized", lambda x: dc.check_features(x), STANDARD * 3, STANDARD),
    _case(
        "unbalanced_labels", lambda y: dc.check_targets(y, 3), np.r_[np.zeros(95), 1, 2], BALANCED
    ),
    _case(
        "poor_init", lambda w: dc.check_initial_weights(w, "relu"), {"w": np.full((4, 4), 0.3)}, HE
    ),
    _case("need_he", lambda w: dc.check_initial_weights(w, "relu"), {"w": HE["w"] * 0.3}, HE),
    _case(
        "need_glorot",
        lambda w: dc.check_initial_weights(w, "tanh"),
        {"w": HE["w"] * 3},
        {"w": RNG.standard_normal((64, 32)) * math.sqrt(2 / 96)},
    ),
    _case(
        "need_lecun",
        lambda w: dc.check_initial_weights(w, "sigmoid"),
        {"w": HE["w"] * 3},
        {"w": RNG.standard_normal((64, 32)) * math.sqrt(1 / 32)},
    ),
    _case("need_init_well", lambda w: dc.check_initial_weights(w, ""), {"w": HE["w"] * 5}, HE),
    _case("need_bias", lambda b: dc.check_initial_biases(b, BALANCED, 3), {}, {"b": np.zeros(3)}),
    _case(
        "zero_bias",
        lambda b: dc.check_initial_biases(b, BALANCED, 3),
        {"b": np.ones(3)},
        {"b": np.zeros(3)},
    ),
    _case(
        "last_bias",
        lambda b: dc.check_initial_biases(b, np.r_[np.zeros(95), 1, 2], 3),
        {"b": np.zeros(3)},
        {"b": np.array([0.9, 0.1, 0.2])},
    ),
    _case(
        "ineff_bias_cls",
        lambda b: dc.check_initial_biases(b, np.r_[np.zeros(95), 1, 2], 3),
        {"b": np.array([0.1, 0.9, 0.5])},
        {"b": np.array([0.9, 0.1, 0.2])},
    ),
    _case("poor_reduction_loss", dc.check_loss_reduction, [1.0, 2.0, 4.0], [1.0, 1.0, 1.0]),
    _case("poor_init_loss", lambda loss: dc.check_initial_loss(loss, 3), 2.3, 1.1),
    _case(
        "nan_loss",
        lambda la: dc.check_single_batch(*la),
        (np.r_[1.0, math.nan], np.r_[0.5, 0.5]),
        (LEARNING, np.linspace(0.3, 1.0, 20)),
    ),
    _case(
        "underfitting_single_batch",
        lambda la: dc.check_single_batch(*la),
        (LEARNING, np.full(20, 0.9)),
        (LEARNING, np.linspace(0.3, 1.0, 20)),
    ),
    _case(
        "zero_loss",
        lambda la: dc.check_single_batch(*la),
        (np.geomspace(2.0, 1e-9, 20), np.ones(20)),
        (LEARNING, np.linspace(0.3, 1.0, 20)),
    ),
    _case("corrupted_data", dc.check_corrupted_labels, np.full(20, 2.3), np.linspace(2.3, 0.1, 20)),
]


@pytest.mark.parametrize(("check", "symptom", "healthy"), TDC_PRE)
def test_thedeepchecker_pre_and_post_check_fires(
    request, check: Callable, symptom, healthy
) -> None:
    assert request.node.callspec.id in _alerts(check(symptom))


@pytest.mark.parametrize(("check", "symptom", "healthy"), TDC_PRE)
def test_thedeepchecker_pre_and_post_check_silent(
    request, check: Callable, symptom, healthy
) -> None:
    assert request.node.callspec.id not in _alerts(check(healthy))


ACTS = RNG.standard_normal((500, 16)).clip(0)  # ReLU-like, std about 0.58
DIVERGING = [1.0, 2.0, 4.5, 9.0, 20.0]
STEADY = [1.0, 1.01, 1.0, 0.99, 1.0]
TDC_OVERFIT = [
    _case("w_nan", lambda v: dc.numerical("w", v, "w"), np.r_[1.0, math.nan], np.ones(2)),
    _case("w_inf", lambda v: dc.numerical("w", v, "w"), np.r_[1.0, math.inf], np.ones(2)),
    _case("act_dead", lambda a: dc.check_dead_neurons(a, "r"), ACTS * (np.arange(16) > 10), ACTS),
    _case(
        "act_sat",
        lambda a: dc.check_saturated_neurons(a, "s"),
        np.where(RNG.random((500, 16)) > 0.5, 0.999, 0.001),
        RNG.uniform(0.3, 0.7, (500, 16)),
    ),
    _case("act_unstable", lambda a: dc.check_activation_spread(a, "r"), ACTS * 10, ACTS * 1.5),
    _case("w_sign", lambda w: dc.check_weight(w, STEADY, "w"), -np.abs(HE["w"]), HE["w"]),
    _case("w_dead", lambda w: dc.check_weight(w, STEADY, "w"), HE["w"] * 1e-7, HE["w"]),
    _case("w_div_1", lambda h: dc.check_divergence("w", h, "w"), [1.0, 2e8], STEADY),
    _case("w_div_2", lambda h: dc.check_divergence("w", h, "w"), DIVERGING, STEADY),
    _case("b_div_2", lambda h: dc.check_divergence("b", h, "b"), DIVERGING, STEADY),
    _case("gw_van_1", lambda h: dc.check_gradient(h, "w"), [1e-3, 1e-7], STEADY),
    _case("gw_van_2", lambda h: dc.check_gradient(h, "w"), [1.0, 0.4, 0.15, 0.07, 0.03], STEADY),
    _case("gw_exp_1", lambda h: dc.check_gradient(h, "w"), [1.0, 2e6], STEADY),
    _case("gw_exp_2", lambda h: dc.check_gradient(h, "w"), DIVERGING, STEADY),
    _case("w_untrained", lambda m: dc.check_updates(m, "w"), [0.0] * 10, [-2.5] * 10),
    _case("w_fast", lambda m: dc.check_updates(m, "w"), [-0.5] * 10, [-2.5] * 10),
    _case("w_slow", lambda m: dc.check_updates(m, "w"), [-5.0] * 10, [-2.5] * 10),
    _case(
        "stagnated_loss",
        lambda ls: dc.check_loss_curve(
            dc.LossState(list(ls), list(np.linspace(0.3, 0.9, len(ls))), min(ls))
        ),
        np.linspace(1.0, 0.97, 10),
        LEARNING[:10],
    ),
    _case(
        "div_loss",
        lambda ls: dc.check_loss_curve(dc.LossState(list(ls), [0.5] * len(ls), min(ls))),
        [1.0, 0.5, 1.0, 2.1, 4.5, 9.5],
        LEARNING[:10],
    ),
    _case(
        "fluctuated_loss",
        lambda ls: dc.check_loss_curve(
            dc.LossState(list(ls), list(np.linspace(0.3, 0.9, len(ls))), min(ls))
        ),
        np.tile([1.0, 0.5], 10),
        LEARNING,
    ),
    _case(
        "non_representative_loss",
        lambda ls: dc.check_loss_curve(
            dc.LossState(list(ls), list(np.tile([0.5, 0.6], 10)), min(ls))
        ),
        LEARNING,
        LEARNING[::-1][::-1],
    ),
]


@pytest.mark.parametrize(("check", "symptom", "healthy"), TDC_OVERFIT)
def test_thedeepchecker_overfit_check_fires(request, check: Callable, symptom, healthy) -> None:
    assert request.node.callspec.id in _alerts(check(symptom))


@pytest.mark.parametrize(("check", "symptom", "healthy"), TDC_OVERFIT)
def test_thedeepchecker_overfit_check_silent(request, check: Callable, symptom, healthy) -> None:
    if request.node.callspec.id == "non_representative_loss":
        state = dc.LossState(list(LEARNING), list(np.linspace(0.3, 1.0, 20)), min(LEARNING))
        assert "non_representative_loss" not in _alerts(dc.check_loss_curve(state))
    else:
        assert request.node.callspec.id not in _alerts(check(healthy))


OUTPUT_CHECKS = [
    _case("out_nan", np.full((4, 3), math.nan), None),
    _case("out_inf", np.full((4, 3), math.inf), None),
    _case("output_invalid", np.full((4, 3), 0.5), None),
    _case("out_cons", np.full((4, 3), 1 / 3), np.zeros(3, dtype=bool)),
]


@pytest.mark.parametrize(("probs", "varied"), OUTPUT_CHECKS)
def test_thedeepchecker_output_check_fires(request, probs: np.ndarray, varied) -> None:
    state = dc.OutputState(np.ones(3, dtype=bool) if varied is None else varied, patience=1)
    assert request.node.callspec.id in _alerts(dc.check_outputs(probs, state, 3))


def test_thedeepchecker_output_check_silent_on_probabilities() -> None:
    probs = np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    assert not dc.check_outputs(probs, dc.OutputState(np.ones(3, dtype=bool), patience=1), 3)


def test_thedeepchecker_label_balance_matches_its_formula() -> None:
    y = np.r_[np.zeros(60), np.ones(30), np.full(10, 2)].astype(int)
    p = np.array([0.6, 0.3, 0.1])
    expected = (math.exp(-(p * np.log(p)).sum()) - 1) / 2
    assert dc.label_balance(y, 3)[0] == pytest.approx(expected)


def test_thedeepchecker_samples_int_size_over_classes_per_class() -> None:
    programme = tdc._Programme(run(probe=tiny_probe()), tiny_probe())
    _, y = programme.sample(16)
    assert len(y) == 3 * (16 // 3) and np.bincount(y.numpy()).tolist() == [5, 5, 5]


def test_thedeepchecker_overfit_phase_sees_dead_units() -> None:
    probe = tiny_probe(tiny_model(dead_bias=-100.0))
    keys = [w.key for w in tdc.overfit_phase(tdc._Programme(run(probe=probe), probe))]
    assert "act_dead" in keys and "w_untrained" in keys
    healthy = tiny_probe()
    keys = [w.key for w in tdc.overfit_phase(tdc._Programme(run(probe=healthy), healthy))]
    assert "act_dead" not in keys and "w_untrained" not in keys


def test_thedeepchecker_post_check_sees_unlearnable_labels() -> None:
    blank = tiny_probe(scale=0.0)
    keys = [w.key for w in tdc.post_check(tdc._Programme(run(probe=blank), blank))]
    assert keys == ["corrupted_data"]


#: Hand-made programmes whose first warning comes from the static pre-checks (the first
#: three), the single-batch fit and the overfit phase.
FIRST_WARNINGS = {
    "unnormalized": lambda: tiny_probe(scale=5.0),
    "constant": lambda: tiny_probe(scale=0.0),
    "need_he": lambda: tiny_probe(tiny_model(he=False)),
    "single_batch": lambda: tiny_probe(),
    "overfit": lambda: tiny_probe(tiny_model(softmax=True)),
}


@pytest.mark.parametrize("case", FIRST_WARNINGS)
def test_thedeepchecker_answers_the_first_warning_of_its_whole_log(case: str) -> None:
    full_probe, probe = FIRST_WARNINGS[case](), FIRST_WARNINGS[case]()
    log = tdc.logged(run(probe=full_probe), full_probe)  # every phase, fail_on: false
    answer = get_diagnoser("thedeepchecker").diagnose(run(probe=probe))
    assert log, "each case logs at least one warning"
    assert answer.label == tdc.SYMPTOMS[log[0].key]
    assert answer.evidence["fired"] == [log[0].key] and answer.evidence["phase"] == log[0].phase
    # It stops there: the probe's counted steps are those up to the first warning only.
    assert 0 < probe.steps_used < full_probe.steps_used
    if case in ("unnormalized", "constant", "need_he"):  # before any training step
        assert probe.steps_used < dc.SINGLE_BATCH_ITERS
    else:
        assert probe.steps_used >= dc.SINGLE_BATCH_ITERS


def test_thedeepchecker_abstains_without_a_probe() -> None:
    answer = get_diagnoser("thedeepchecker").diagnose(run())
    assert answer.label == UNKNOWN and answer.evidence["missing"] == ["probe"]


# -- on real runs ------------------------------------------------------------------------


@pytest.mark.parametrize("name", PORTS)
def test_port_answers_real_digits_runs_naming_its_rule(digits_grid, name: str) -> None:
    diagnoser, task = get_diagnoser(name), get_task("digits")
    for condition in DIGITS_CONDITIONS:
        outcome = diagnose_safely(diagnoser, run_for(digits_grid[(condition, 0)], task))
        assert outcome.status == "ok", outcome.message
        labels = {
            *TABLES[name].values(),
            *(v for v in getattr(PORT_MODULES[name], "FIXES", {}).values() if v),
        }
        assert outcome.evidence["rule"] and outcome.evidence["table_label"] in labels
        assert set(outcome.evidence["fired"]) <= set(RULES[name])
