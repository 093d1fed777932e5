"""rules' checks for a language model's run, each read off a trace made for it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from faultbench.diagnosers import rules
from faultbench.scoring.run import Run
from faultbench.training.trace import RunConfig, Trace

STEPS, V = 100, 40


def _run(**fields: Any) -> Run:
    """A healthy-looking sequence run (loss falling from ln V), with ``fields`` replaced."""
    loss = np.linspace(math.log(V), 0.1, STEPS)
    base: dict[str, Any] = {
        "loss": loss,
        "grad_norm": {"layer": np.ones(STEPS)},
        "update_ratio": {"layer": np.full(STEPS, 1e-3)},
        "zero_grad_share": np.zeros(STEPS),
        "inactive_share": np.zeros(STEPS),
        "wait_seconds": np.zeros(STEPS),
        "compute_seconds": np.full(STEPS, 0.01),
        "eval_steps": np.array([50.0, 100.0]),
        "train_acc": np.array([0.5, 0.95]),
        "val_acc": np.array([0.4, 0.9]),
        "val_loss": np.array([1.0, 0.3]),
        "val_token_acc": np.array([0.8, 0.97]),
        "counted_share": np.full(STEPS, 0.3),
        "padding_share": np.full(STEPS, 0.2),
        "padding_counted_share": np.zeros(STEPS),
        "attention_entropy": {"attn": np.full(STEPS, 1.0)},
        "attention_future": {"attn": np.zeros(STEPS)},
        "weight_count": {"layer": 100},
        "weight_change": {"layer": 0.5},
        "no_grad_weights": {"layer": 0},
        "stat_steps": np.arange(STEPS, dtype=float),
        "lr": np.full(STEPS, 1e-3),
    }
    base.update(fields)
    config = RunConfig("Adam", 1e-3, 32, STEPS, V, (64, 256, 64, V), 10_000)
    return Run("numbers", 0, Trace(**base), config)


def _label(run: Run) -> str:
    return rules.RulesDiagnoser().diagnose(run).label


def test_a_healthy_sequence_run_is_healthy() -> None:
    assert _label(_run()) == "healthy"


@pytest.mark.parametrize(
    ("fields", "label", "rule"),
    [
        ({"padding_counted_share": np.full(STEPS, 0.5)}, "unmasked_loss", "padding_in_loss"),
        ({"attention_future": {"attn": np.full(STEPS, 0.3)}}, "causal_mask_missing", ""),
        ({"loss": np.linspace(4 * math.log(V), 0.4, STEPS)}, "loss_normalization", ""),
        (
            {"val_token_acc": np.array([1.0, 1.0]), "train_acc": np.array([0.0, 0.0])},
            "labels_not_shifted",
            "copies_what_it_sees",
        ),
        ({"val_token_acc": np.array([0.6, 0.6])}, "unmasked_loss", "tokens_behind_answers"),
        (
            {"lr": np.concatenate([np.linspace(1e-4, 1e-3, 50), np.linspace(1e-4, 1e-3, 50)])},
            "resume_without_state",
            "restarted",
        ),
    ],
    ids=["padding", "future", "summed", "copies", "prompt", "restart"],
)
def test_each_sequence_rule(fields: dict[str, Any], label: str, rule: str) -> None:
    diagnosis = rules.RulesDiagnoser().diagnose(_run(**fields))
    assert diagnosis.label == label
    if rule:
        assert diagnosis.evidence["decided_by"] == rule


def test_a_warm_up_then_decay_is_no_restart() -> None:
    # The last step's rate: a cosine computed one step past its end rises by a hair.
    rate = np.concatenate([np.linspace(1e-4, 1e-3, 10), np.linspace(1e-3, 0, 89), [2e-9]])
    assert _label(_run(lr=rate)) == "healthy"


def test_a_narrow_transformer_is_too_small_but_a_vocabulary_wider_than_it_is_not() -> None:
    run = _run()
    narrow = Run(run.task, 0, run.trace, RunConfig("Adam", 1e-3, 32, STEPS, V, (2, 8, 2, V), 9))
    assert _label(narrow) == "too_small_model"
    wide_vocab = Run(
        run.task, 0, run.trace, RunConfig("Adam", 1e-3, 32, STEPS, 500, (64, 64, 500), 9)
    )
    assert _label(wide_vocab) == "healthy"  # a language model's width is below its vocabulary


def test_the_sequence_rules_never_read_a_classifiers_run() -> None:
    run = _run(counted_share=np.full(STEPS, np.nan), padding_counted_share=np.full(STEPS, np.nan))
    assert not rules.f.is_sequence(run)
    assert _label(run) == "healthy"  # the classifier rules alone: nothing fires on it
    assert rules.RulesDiagnoser.tuned_on == {"digits", "numbers", "diabetes"}
