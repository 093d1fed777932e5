"""Real ``Trainer.train()`` runs of tiny GPT-2, Llama and BERT models built from configs,
under FaultbenchCallback: what it records, the doctor's answer on a healthy run, a
``compute_loss`` of one's own, resumed runs, and the probe of a Trainer."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from trainer_fixtures import (
    FAMILIES,
    VOCAB,
    Forwards,
    StopAt,
    arguments,
    bert_classifier,
    built,
    class_accuracy,
    counting,
    llama,
    one_thread,
    parity,
    token_accuracy,
    transformers,
)

from faultbench import Probe
from faultbench.core.errors import FaultbenchError
from faultbench.integrations.transformers import FaultbenchCallback, Resume

MICRO, ACCUMULATE = 8, 2
HEALTHY_STEPS, EVAL_EVERY, STOP = 40, 10, 20


def _train(trainer: Any, **kwargs: Any) -> Any:
    with one_thread():
        trainer.train(**kwargs)
    return trainer


def _logged_losses(trainer: Any) -> np.ndarray:
    """The per-update training loss the Trainer logged (logging every step)."""
    return np.array([h["loss"] for h in trainer.state.log_history if "loss" in h])


def _token_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Next-token accuracy over the counted positions, computed here on its own."""
    guess, target = logits[:, :-1].argmax(-1), labels[:, 1:]
    counted = target != -100
    return float((guess[counted] == target[counted]).double().mean())


# -- what the callback reads off a Trainer's run -----------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_it_records_the_logits_labels_and_loss_the_trainer_computed(
    family: str, tmp_path: Path
) -> None:
    model = built(FAMILIES[family])
    forwards = Forwards(model)
    callback = FaultbenchCallback(every=1, show=False)
    args = arguments(
        tmp_path,
        per_device_train_batch_size=MICRO,
        gradient_accumulation_steps=ACCUMULATE,
        max_steps=5,
        logging_strategy="steps",
        logging_steps=1,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=counting(80, 0), callbacks=[callback]
    )
    _train(trainer)
    trace, config = callback.monitor.trace(), callback.monitor.config()
    # The logits' vocabulary, not the 0-d loss a model given its labels returns first.
    assert (config.kind, config.n_classes) == ("next_token", VOCAB)
    assert config.loss_reference == pytest.approx(np.log(VOCAB))
    # The loss is what the Trainer backpropagated and logs, update by update.
    np.testing.assert_allclose(trace.loss, _logged_losses(trainer), rtol=1e-6)
    lasts = forwards.seen[ACCUMULATE - 1 :: ACCUMULATE]  # each update's last micro-batch
    np.testing.assert_allclose(trace.batch_acc, [_token_accuracy(lg, lb) for lg, lb, _ in lasts])
    counted = [float((lb[:, 1:] != -100).double().mean()) for _, lb, _ in lasts]
    np.testing.assert_allclose(trace.counted_share, counted)
    assert (trace.padding_counted_share[np.isfinite(trace.padding_counted_share)] == 0).all()


def test_a_sequence_classifier_is_multiclass_with_its_evaluations(tmp_path: Path) -> None:
    model = built(bert_classifier)
    forwards = Forwards(model)
    callback = FaultbenchCallback(every=1, show=False)
    args = arguments(tmp_path, max_steps=6, eval_strategy="steps", eval_steps=3)
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=parity(96, 0),
        eval_dataset=parity(64, 1),
        compute_metrics=class_accuracy,
        callbacks=[callback],
    )
    _train(trainer)
    trace, config = callback.monitor.trace(), callback.monitor.config()
    assert (config.kind, config.n_classes, config.score) == ("multiclass", 2, "accuracy")
    hits = [float((lg.argmax(-1) == lb).double().mean()) for lg, lb, _ in forwards.seen]
    np.testing.assert_allclose(trace.batch_acc, hits)
    evals = [h for h in trainer.state.log_history if "eval_loss" in h]
    np.testing.assert_array_equal(trace.eval_steps, [3, 6])
    np.testing.assert_allclose(trace.val_acc, [h["eval_accuracy"] for h in evals])
    np.testing.assert_allclose(trace.val_loss, [h["eval_loss"] for h in evals])


class DocsComputeLoss(transformers.Trainer):  # type: ignore[misc]
    """A ``compute_loss`` as the Hugging Face docs write one: it pops the labels and returns
    the micro-batch's mean loss (it ignores ``num_items_in_batch``)."""

    returned: list[float]

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits[:, :-1]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        if model.training:
            self.returned.append(float(loss.detach()))
        return (loss, outputs) if return_outputs else loss


def test_a_compute_loss_of_ones_own_reaches_the_trace_as_it_scaled_the_loss(
    tmp_path: Path,
) -> None:
    model = built(llama)
    forwards = Forwards(model)
    callback = FaultbenchCallback(every=1, show=False, check_every=2)
    args = arguments(
        tmp_path,
        per_device_train_batch_size=MICRO,
        gradient_accumulation_steps=ACCUMULATE,
        max_steps=5,
        logging_strategy="steps",
        logging_steps=1,
    )
    trainer = DocsComputeLoss(
        model=model, args=args, train_dataset=counting(80, 0), callbacks=[callback]
    )
    trainer.returned = []
    _train(trainer)
    trace = callback.monitor.trace()
    # The labels compute_loss popped were read before it ran: the token accuracy is there.
    assert all(lb is None for _, lb, _ in forwards.seen)  # the model never saw them
    assert np.isfinite(trace.batch_acc).all()
    np.testing.assert_allclose(trace.loss, _logged_losses(trainer), rtol=1e-6)
    # This transformers does not divide such a loss by the accumulation steps (it expects
    # compute_loss to have normalized by num_items_in_batch): each update's loss is its
    # micro-batches' summed, ACCUMULATE times the mean, and the trace holds it so.
    summed = np.add.reduceat(trainer.returned, np.arange(0, len(trainer.returned), ACCUMULATE))
    np.testing.assert_allclose(trace.loss, summed, rtol=1e-5)
    assert trace.loss[0] > 1.5 * np.log(VOCAB)
    assert callback.report is not None and callback.report.headline == "loss_normalization"
    # ... and it was said while the run went on: checked every 2 updates, last at update 4
    (warning,) = callback.warnings
    assert (warning.fault, warning.step) == ("loss_normalization", 4)


# -- a healthy run, its evaluations, the doctor -----------------------------------------


def _healthy_trainer(
    output_dir: Path, callback: FaultbenchCallback, model: Any = None, **overrides: Any
) -> Any:
    """Llama counting, evaluated every EVAL_EVERY updates (the run the doctor is asked on);
    ``model``: the one a job goes on with (a new one by default)."""
    settings = {"max_steps": HEALTHY_STEPS, "eval_strategy": "steps", "eval_steps": EVAL_EVERY}
    args = arguments(output_dir, **{**settings, **overrides})
    return transformers.Trainer(
        model=built(llama) if model is None else model,
        args=args,
        train_dataset=counting(512, 0),
        eval_dataset=counting(64, 1),
        compute_metrics=token_accuracy,
        callbacks=[callback],
    )


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[FaultbenchCallback, Any]:
    # Recorded every 5th update: 40 updates sampled as every=20 samples a run of 160.
    callback = FaultbenchCallback(
        probe=Probe.from_trainer, every=5, show=False, check_every=10, stop_on_warning=True
    )
    trainer = _healthy_trainer(tmp_path_factory.mktemp("healthy"), callback)
    return callback, _train(trainer)


def test_the_doctor_calls_a_healthy_run_healthy(healthy: tuple) -> None:
    callback, _ = healthy
    report = callback.report
    assert report is not None and report.headline == "healthy", str(report)
    assert report.diagnosis.evidence["memorization"]["memorized"] is True  # the probe ran


def test_a_healthy_run_is_never_warned_about_while_it_trains(healthy: tuple) -> None:
    callback, _ = healthy
    # Checked every 10 updates and stopped at a warning: it ran to its end, and said nothing.
    assert callback.check_every == 10 and callback.stop_on_warning
    assert callback.monitor.trace().steps == HEALTHY_STEPS and callback.warnings == []


def test_every_evaluation_the_trainer_ran_is_in_the_trace(healthy: tuple) -> None:
    callback, trainer = healthy
    trace = callback.monitor.trace()
    evals = [h for h in trainer.state.log_history if "eval_loss" in h]
    np.testing.assert_array_equal(trace.eval_steps, [10, 20, 30, 40])
    np.testing.assert_allclose(trace.val_loss, [h["eval_loss"] for h in evals])
    np.testing.assert_allclose(trace.val_token_acc, [h["eval_token_acc"] for h in evals])
    assert set(trace.metrics) == {"val_loss", "val_token_acc"}  # no runtime, no epoch


# -- one trace across resumed runs ------------------------------------------------------


def test_a_run_resumed_from_its_checkpoint_is_one_trace_with_its_state(
    healthy: tuple, tmp_path: Path
) -> None:
    callback = FaultbenchCallback(show=False)
    first = _healthy_trainer(tmp_path, callback, save_strategy="steps", save_steps=STOP)
    first.add_callback(StopAt(STOP))
    _train(first)  # preempted after update 20, its checkpoint written
    # A second Trainer goes on with the same model, from the checkpoint.
    second = _healthy_trainer(
        tmp_path, callback, first.model, save_strategy="steps", save_steps=STOP
    )
    _train(second, resume_from_checkpoint=str(tmp_path / f"checkpoint-{STOP}"))
    assert callback.resumes == [Resume(STOP, STOP, True, STOP)]
    resumed, whole = callback.monitor.trace(), healthy[0].monitor.trace()
    # One trace, the same as the run that was never stopped, update for update.
    np.testing.assert_array_equal(resumed.loss, whole.loss)
    np.testing.assert_array_equal(resumed.lr, whole.lr)
    np.testing.assert_array_equal(resumed.eval_steps, whole.eval_steps)
    assert callback.report is not None
    assert callback.report.diagnosis.evidence["restarted"]["lr_restarts"] == 0


def test_a_run_resumed_without_its_state_is_seen(tmp_path: Path) -> None:
    callback = FaultbenchCallback(show=False)
    first = _healthy_trainer(tmp_path, callback)
    first.add_callback(StopAt(STOP))
    _train(first)
    # The job goes on in a new Trainer on the same model, but from a fresh optimizer and
    # schedule, not from the checkpoint: the rate starts over.
    again = _healthy_trainer(tmp_path, callback, first.model, max_steps=HEALTHY_STEPS - STOP)
    _train(again)
    (resume,) = callback.resumes
    assert resume.lost == ("step count", "optimizer state", "schedule")
    trace = callback.monitor.trace()
    assert trace.steps == HEALTHY_STEPS and trace.lr[STOP] == trace.lr[0] > trace.lr[STOP - 1]
    assert callback.report is not None and callback.report.headline == "resume_without_state"


def test_another_model_object_is_another_job(tmp_path: Path) -> None:
    callback = FaultbenchCallback(show=False)
    _train(_healthy_trainer(tmp_path, callback, max_steps=2, eval_strategy="no"))
    other = _healthy_trainer(tmp_path, callback, max_steps=2, eval_strategy="no")
    with pytest.raises(FaultbenchError, match=re.escape("traced another model object")):
        _train(other)


class Crash(transformers.TrainerCallback):  # type: ignore[misc]
    """Raises out of ``train()`` after update 2, once (a job killed mid-run)."""

    def __init__(self) -> None:
        self.armed = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.armed and state.global_step == 2:
            self.armed = False
            raise RuntimeError("killed")


def test_a_run_that_raised_out_of_train_is_read_once_when_it_goes_on(tmp_path: Path) -> None:
    callback = FaultbenchCallback(show=False)
    args = arguments(tmp_path, max_steps=4, logging_strategy="steps", logging_steps=1)
    trainer = transformers.Trainer(
        model=built(llama), args=args, train_dataset=counting(64, 0), callbacks=[callback]
    )
    trainer.add_callback(Crash())
    with pytest.raises(RuntimeError, match="killed"):
        _train(trainer)
    trainer.state.log_history.clear()
    _train(trainer)  # the same Trainer again: its training_step is wrapped once, not twice
    trace = callback.monitor.trace()
    assert trace.steps == 2 + 4
    np.testing.assert_allclose(trace.loss[2:], _logged_losses(trainer), rtol=1e-6)
    assert "training_step" not in vars(trainer)  # put back when training ended


# -- the probe of a Trainer -------------------------------------------------------------


def test_the_probe_of_a_trainer_rebuilds_the_model_and_takes_its_own_loss(
    healthy: tuple,
) -> None:
    _, trainer = healthy
    probe = Probe.from_trainer(trainer)
    first, second = probe.make_model(), probe.make_model()
    assert type(first) is type(trainer.model)
    for (name, a), b, trained in zip(
        first.named_parameters(), second.parameters(), trainer.model.parameters()
    ):
        assert torch.equal(a, b), name  # seeded: the same weights each time
        assert not torch.equal(a, trained) or a.dim() == 1, name  # untrained (norms are 1)
    X, y = probe.train_data(16)
    assert set(X) == {"input_ids", "attention_mask", "labels"} and torch.equal(y, X["labels"])
    rows = counting(16, 0)  # the Trainer's first training examples, as collated
    assert torch.equal(X["input_ids"], torch.stack([r["input_ids"] for r in rows]))
    logits = probe.forward(first, X)
    loss = probe.loss(logits, y)
    expected = F.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB), y[:, 1:].reshape(-1), ignore_index=-100
    )
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-5)
    assert probe.steps_used == 1
    with pytest.raises(FaultbenchError, match="the model's own"):
        probe.loss(logits.clone(), y)  # not an output the probe computed


def test_a_probe_of_a_users_hugging_face_model(healthy: tuple) -> None:
    rows = counting(8, 0)
    X = {k: torch.stack([r[k] for r in rows]) for k in ("input_ids", "attention_mask")}
    y = torch.stack([r["labels"] for r in rows])
    with pytest.raises(FaultbenchError, match=re.escape("X must be a dict holding its 'labels'")):
        Probe.from_user(llama, None, X, y)

    def shifted(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1))

    probe = Probe.from_user(llama, shifted, X, y)  # the logits of its ModelOutput
    model = probe.make_model()
    logits = probe.forward(model, X)
    assert logits.shape == (8, 16, VOCAB)
    with torch.no_grad():
        assert float(probe.loss(logits, y)) == pytest.approx(float(shifted(logits, y)))
