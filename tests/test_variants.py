"""Every variant and held-out fault: documented, applicable or refused with a reason,
and visible in the trace at its canonical severity in every seed."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conftest import CLASSIFIER_FAULTS, CLASSIFIER_VARIANTS, DIGITS_CONDITIONS, SIGNAL_SEEDS
from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import (
    FAULTS,
    HEALTHY,
    HELD_OUT,
    OTHER_FAULT,
    PARTS,
    Condition,
    condition,
    condition_names,
    find,
    inapplicable,
    labels,
    variant_conditions,
    variant_ids,
)
from faultbench.scoring.manifest import manifestation
from faultbench.storage.bases import DATA_BOUND
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task, task_names
from faultbench.training.engine import SerialEngine
from faultbench.training.trace import RunConfig, Trace

# Healthy seeds a run is compared with. Not 5 (`faultbench run`'s classic default): with 5
# the Bonferroni-corrected t quantile is about 8.6 (4 degrees of freedom), and shapes' one-channel
# CNN, 12 points of validation accuracy under healthy (0.79 against 0.90-0.93), stayed inside.
HEALTHY_REFERENCE = 10
CHECK_TASKS = ("digits", "shapes")  # digits first; a variant that cannot run there, on shapes

Grid = dict[tuple[str, str, int], RunRecord]


def _task_for(ident: str) -> str:
    """The first of CHECK_TASKS the variant applies to."""
    for name in CHECK_TASKS:
        if not inapplicable(ident, get_task(name)):
            return name
    raise AssertionError(f"{ident} applies to none of {CHECK_TASKS}")


@pytest.fixture(scope="module")
def variant_grid(shared_store_root: Path, trainer: SerialEngine) -> Grid:
    """(task, condition, seed) -> record: each variant on its task, plus healthy seeds."""
    specs: dict[str, list[RunSpec]] = {name: [] for name in CHECK_TASKS}
    for ident in CLASSIFIER_VARIANTS:
        task = get_task(_task_for(ident))
        specs[task.name] += [
            RunSpec(task.name, task.fingerprint, condition(ident), s) for s in range(SIGNAL_SEEDS)
        ]
    grid: Grid = {}
    for name, faulty in specs.items():
        task = get_task(name)
        healthy = [
            RunSpec(name, task.fingerprint, Condition(), s) for s in range(HEALTHY_REFERENCE)
        ]
        store = Store(shared_store_root)
        for spec, record, _ in ensure_records(healthy + faulty, task, store=store, engine=trainer):
            grid[(name, spec.condition.name, spec.seed)] = record
    return grid


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SIGNAL_SEEDS))
@pytest.mark.parametrize("ident", CLASSIFIER_VARIANTS)  # a language model's: test_language_faults
def test_variant_shows_in_every_seed(ident: str, seed: int, variant_grid: Grid) -> None:
    task = _task_for(ident)
    record = variant_grid[(task, condition(ident).name, seed)]
    assert record.ok and record.trace and record.config, record.error
    healthy = [variant_grid[(task, "healthy", s)] for s in range(HEALTHY_REFERENCE)]
    reference = [(r.trace, r.config) for r in healthy if r.trace and r.config]
    seen = manifestation(record.trace, record.config, reference)
    assert seen.visible is True, (ident, task, seed)


# -- each mechanism's own signature, computed from the trace by hand -----------------

LN_C = math.log(10)  # digits


def _late_spikes(t: Trace) -> int:
    return int((np.nan_to_num(t.loss[100:], nan=np.inf) > LN_C).sum())


def _per_epoch(t: Trace, h: Trace, c: RunConfig) -> None:
    # The gradient sum grows through each epoch and drops back at its start.
    per = 1438 // 32  # digits' training examples over the batch size
    g = t.grad_norm["hidden"]
    rise = [g[k * per + per - 1] / g[k * per] for k in range(len(g) // per)]
    assert np.median(rise) > 5


def _unstandardized(t: Trace, h: Trace, c: RunConfig) -> None:
    assert t.loss[0] > 100 * LN_C and t.input_stats["std"] > 100 * h.input_stats["std"]


def _warmup(t: Trace, h: Trace, c: RunConfig) -> None:
    assert _late_spikes(t) >= 10 and _late_spikes(h) == 0
    assert c.lr == pytest.approx(1e-3 * 100)  # the config's rate is the schedule's peak
    assert t.lr[-1] < 1e-3 / 100 and t.lr.max() == pytest.approx(c.lr)  # decayed by the end


def _negative_init(t: Trace, h: Trace, c: RunConfig) -> None:
    assert t.inactive_share.min() == 1.0 and h.inactive_share.mean() < 0.1
    assert t.no_grad_weights["hidden"] == t.weight_count["hidden"]


def _slow_dataset(t: Trace, h: Trace, c: RunConfig) -> None:
    assert t.wait_share > 0.5 and h.wait_share < 0.3
    assert abs(t.val_acc[-1] - h.val_acc[-1]) < 0.03


def _one_worker(t: Trace, h: Trace, c: RunConfig) -> None:
    # Its wait is what handing a batch over costs, not a multiple: data-bound on digits'
    # sub-millisecond step, whatever the machine, and the healthy run's accuracy.
    assert t.wait_share >= DATA_BOUND > h.wait_share
    assert abs(t.val_acc[-1] - h.val_acc[-1]) < 0.03


def _bottleneck(t: Trace, h: Trace, c: RunConfig) -> None:
    assert min(c.layer_widths) == 2 and len(c.layer_widths) == 5
    assert t.val_acc[-1] < h.val_acc[-1] - 0.1


def _two_encoders(t: Trace, h: Trace, c: RunConfig) -> None:
    assert t.train_acc[-1] > 0.9 and t.val_acc[-1] < 0.3


def _swapped(t: Trace, h: Trace, c: RunConfig) -> None:
    # Two of ten classes are always wrong: about a fifth of the validation set.
    assert t.train_acc[-1] > 0.9
    assert h.val_acc[-1] - 0.3 < t.val_acc[-1] < h.val_acc[-1] - 0.1


def _nll_of_probs(t: Trace, h: Trace, c: RunConfig) -> None:
    assert (t.loss <= 0).all() and (t.loss >= -1).all()  # minus a probability


def _requires_grad(t: Trace, h: Trace, c: RunConfig) -> None:
    assert t.weight_change["hidden"] == 0.0
    assert t.no_grad_weights["hidden"] == t.weight_count["hidden"]  # no gradient at all


def _zero_lr(t: Trace, h: Trace, c: RunConfig) -> None:
    assert t.weight_change["hidden"] == 0.0 and (t.update_ratio["hidden"] == 0).all()
    assert (t.grad_norm["hidden"] > 0).all()  # gradients arrive, the rate is 0


def _sorted_classes(t: Trace, h: Trace, c: RunConfig) -> None:
    # Each new class arrives as a surprise: the loss jumps back at every boundary.
    assert np.nanmax(t.loss[100:]) > 2 * np.nanmax(h.loss[100:])


def _shuffled_targets(t: Trace, h: Trace, c: RunConfig) -> None:
    assert t.val_acc[-1] < 0.2 and t.train_acc[-1] < 0.5


def _label_noise(t: Trace, h: Trace, c: RunConfig) -> None:
    assert t.train_acc[-1] < 0.6 < 0.8 < t.val_acc[-1]  # learns the truth under the noise


def _deep_sigmoid(t: Trace, h: Trace, c: RunConfig) -> None:
    means = {k: float(v.mean()) for k, v in t.grad_norm.items()}
    assert len(means) == 9 and min(means.values()) < means["output"] / 100
    assert t.val_acc[-1] < 0.5


def _tiny_clip(t: Trace, h: Trace, c: RunConfig) -> None:
    total = np.sqrt(sum(g**2 for g in t.grad_norm.values()))  # every parameter is a Linear's
    assert total.max() <= 1e-7 * (1 + 1e-4)
    assert t.val_acc[-1] < h.val_acc[-1] - 0.05


def _huge_weight_decay(t: Trace, h: Trace, c: RunConfig) -> None:
    assert abs(np.mean(t.loss[-20:]) / LN_C - 1) < 0.02 and t.val_acc[-1] < 0.2


def _pixels(t: Trace, h: Trace, c: RunConfig) -> None:
    assert 150 < t.input_stats["abs_max"] < 300 and h.input_stats["abs_max"] < 20


def _sgd_momentum(t: Trace, h: Trace, c: RunConfig) -> None:
    assert not t.val_acc[-1] > h.val_acc[-1] - 0.3  # NaN counts as collapsed


def _one_channel(t: Trace, h: Trace, c: RunConfig) -> None:
    assert c.layer_widths[0] == 1  # the monitor counts a convolution's width in channels: one
    assert t.val_acc[-1] < h.val_acc[-1] - 0.1


SIGNATURES: dict[str, Callable[[Trace, Trace, RunConfig], None]] = {
    "missing_zero_grad.per_epoch": _per_epoch,
    "huge_inputs.unstandardized": _unstandardized,
    "huge_inputs.pixels_0_255": _pixels,
    "lr_too_high.warmup": _warmup,
    "lr_too_high.sgd_momentum": _sgd_momentum,
    "dead_units.negative_init": _negative_init,
    "starved_loader.slow_dataset": _slow_dataset,
    "starved_loader.one_worker": _one_worker,
    "too_small_model.bottleneck": _bottleneck,
    "too_small_model.one_channel": _one_channel,
    "label_mismatch.two_encoders": _two_encoders,
    "label_mismatch.swapped": _swapped,
    "softmax_before_loss.nll_of_probs": _nll_of_probs,
    "frozen_layer.requires_grad": _requires_grad,
    "frozen_layer.zero_lr": _zero_lr,
    "sorted_classes": _sorted_classes,
    "shuffled_targets": _shuffled_targets,
    "label_noise": _label_noise,
    "deep_sigmoid": _deep_sigmoid,
    "tiny_clip": _tiny_clip,
    "huge_weight_decay": _huge_weight_decay,
}
CLASSIC = set(FAULTS.names())  # their signatures: test_fault_signals.py


def test_every_new_mechanism_has_a_signature() -> None:
    assert sorted(SIGNATURES) == sorted(set(CLASSIFIER_VARIANTS) - CLASSIC)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SIGNAL_SEEDS))
@pytest.mark.parametrize("ident", sorted(SIGNATURES))
def test_variant_signature(ident: str, seed: int, variant_grid: Grid) -> None:
    task = _task_for(ident)
    record = variant_grid[(task, condition(ident).name, seed)]
    healthy = variant_grid[(task, "healthy", seed)].trace
    assert record.trace and record.config and healthy
    SIGNATURES[ident](record.trace, healthy, record.config)


@pytest.mark.parametrize("ident", variant_ids())
def test_variant_is_documented(ident: str) -> None:
    fault, variant = find(ident)
    assert fault.summary and variant.summary and "\n" not in variant.summary
    assert variant.lives and set(variant.lives.split("+")) <= set(PARTS)
    if variant.severity is not None:
        knob = variant.severity
        assert knob.low <= knob.canonical <= knob.high and knob.meaning
        assert condition(ident).faults == ((ident, knob.canonical),)
    else:
        assert condition(ident).faults == ((ident, None),)


@pytest.mark.parametrize("name", [*FAULTS.names(), *HELD_OUT.names()])
def test_every_fault_has_its_mechanisms(name: str) -> None:
    fault = find(name)[0]
    # The classifier faults came with two or more real mechanisms each; a language
    # model's fault (and a held-out one) is one bug, in one form.
    assert len(fault.variants) >= (2 if name in CLASSIFIER_FAULTS else 1)
    assert fault.transform is fault.variants[0].transform  # the classic form
    assert fault.severity is fault.variants[0].severity


@pytest.mark.parametrize("task", task_names())
def test_every_variant_runs_or_says_why_not(task: str) -> None:
    the_task = get_task(task)
    conditions, skipped = variant_conditions(the_task)
    assert sorted([c.name for c in conditions] + list(skipped)) == sorted(variant_ids())
    assert all(why.strip() for why in skipped.values())
    for ident, why in skipped.items():
        with pytest.raises(FaultbenchError, match=re.escape(why)):
            condition(ident).apply(_recipe(task))
        with pytest.raises(FaultbenchError, match=re.escape(f"does not apply to {task}: {why}")):
            condition(ident, task=the_task)  # before any work
    for cond in conditions:
        assert condition(cond.name, task=the_task) == cond


def _recipe(task: str):  # type: ignore[no-untyped-def]
    from faultbench.faults.recipe import base_setup

    return base_setup(get_task(task), 0)


def test_variants_that_need_another_task_say_so_on_digits() -> None:
    digits = get_task("digits")
    assert "not images" in inapplicable("huge_inputs.pixels_0_255", digits)
    assert "SGD" in inapplicable("lr_too_high.sgd_momentum", digits)
    assert "no convolution" in inapplicable("too_small_model.one_channel", digits)
    assert "token ids" in inapplicable("huge_inputs.unstandardized", get_task("language"))


def test_a_variant_is_scored_under_its_faults_label() -> None:
    cond = condition("frozen_layer.requires_grad", "huge_inputs")
    assert cond.name == "frozen_layer.requires_grad+huge_inputs"
    assert cond.label == "frozen_layer+huge_inputs"
    assert cond.labels == {"frozen_layer", "huge_inputs"} and not cond.held_out
    assert condition("frozen_layer.left_out") == condition("frozen_layer")  # the classic form
    held = condition("label_noise")
    assert held.held_out and held.label == "label_noise"


def test_held_out_names_are_no_answer_but_other_fault_is() -> None:
    assert labels() == [*condition_names(), OTHER_FAULT]
    assert condition_names()[: len(DIGITS_CONDITIONS)] == DIGITS_CONDITIONS  # then a language
    assert len(condition_names()) == len(DIGITS_CONDITIONS) + 6  # model's six faults
    assert not set(HELD_OUT.names()) & set(labels())
    assert len(HELD_OUT.names()) >= 6


def test_bad_variant_names_say_what_is_valid() -> None:
    with pytest.raises(
        FaultbenchError,
        match=re.escape(
            "Unknown frozen_layer variant 'requires_grd'. Did you mean "
            "'requires_grad'? Valid: code_table, embedding, left_out, requires_grad, zero_lr"
        ),
    ):
        condition("frozen_layer.requires_grd")
    with pytest.raises(FaultbenchError, match=re.escape("Did you mean 'label_noise'?")):
        condition("label_nosie")
    with pytest.raises(FaultbenchError, match="the same fault twice"):
        condition("frozen_layer", "frozen_layer.zero_lr")
    with pytest.raises(FaultbenchError, match=re.escape("expected 0.1 to 0.9")):
        condition(("label_noise", 0.95))


def test_list_shows_every_variant_and_held_out_fault(capsys: pytest.CaptureFixture[str]) -> None:
    from faultbench.cli.main import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    held = out.index("held-out faults")
    for ident in variant_ids():
        fault, variant = find(ident)
        at = out.index(f"  {fault.name} ")
        assert f".{variant.name} " in out[at:] and variant.summary in out[at:]
        assert (at > held) == (fault.name in HELD_OUT.names())
    assert "not on digits: the inputs are not images" in out


@pytest.mark.parametrize("ident", variant_ids())
def test_a_run_is_right_only_under_its_faults_answer(ident: str) -> None:
    from faultbench.scoring.evaluate import RunResult

    fault = ident.partition(".")[0]
    held = fault in HELD_OUT.names()
    right = OTHER_FAULT if held else fault

    def answered(label: str) -> bool:
        return RunResult(seed=0, condition=ident, predicted=label, status="ok").correct

    assert answered(right)
    assert not answered(HEALTHY) and not answered(ident if "." in ident else "unknown")
    assert answered(OTHER_FAULT) is held  # other_fault is wrong on a known fault
