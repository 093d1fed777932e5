"""The Trainer callback: a real ``Trainer.train`` of a tiny GPT-2 built from a config, on CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from trainer_fixtures import one_thread, transformers

from faultbench.integrations.transformers import FaultbenchCallback

VOCAB, CONTEXT = 24, 12
EXAMPLES, MICRO, ACCUMULATE, UPDATES = 64, 8, 2, 6


def _data() -> list[dict[str, torch.Tensor]]:
    """Prompt -> answer rows: the answer repeats the prompt's first tokens; right-padded with
    0; the labels are -100 on the prompt and the padding."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(EXAMPLES):
        prompt_len, answer_len = int(torch.randint(3, 6, (1,), generator=g)), 2
        prompt = torch.randint(3, VOCAB, (prompt_len,), generator=g)
        ids = torch.cat([torch.tensor([1]), prompt, prompt[:answer_len], torch.tensor([2])])
        ids = torch.nn.functional.pad(ids, (0, CONTEXT - len(ids)))
        mask = (torch.arange(CONTEXT) < 1 + prompt_len + answer_len + 1).long()
        labels = torch.where(torch.arange(CONTEXT) > prompt_len, ids, -100)
        labels[mask == 0] = -100
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return rows


def _train(tmp_path: Path, callback: FaultbenchCallback) -> tuple[object, list, object]:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=CONTEXT,
        n_embd=32,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        attn_implementation="eager",
        output_attentions=True,
    )
    model = transformers.GPT2LMHeadModel(config)
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def record(module: torch.nn.Module, args: object, kwargs: dict, out: object) -> None:
        if module.training:  # what this test computes the accuracy from, on its own
            seen.append((out.logits.detach(), kwargs["labels"], kwargs["attention_mask"]))

    model.register_forward_hook(record, with_kwargs=True)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=MICRO,
        gradient_accumulation_steps=ACCUMULATE,
        max_steps=UPDATES,
        learning_rate=3e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=_data(), callbacks=[callback]
    )
    with one_thread():
        trainer.train()
    return trainer, seen, model


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    callback = FaultbenchCallback(every=1, show=False)
    trainer, seen, model = _train(tmp_path_factory.mktemp("trainer"), callback)
    return callback, trainer, seen, model


def test_one_step_per_optimizer_update(trained: tuple) -> None:
    callback, trainer, seen, _ = trained
    trace = callback.monitor.trace()
    assert trainer.state.global_step == UPDATES
    assert trace.steps == UPDATES  # not UPDATES * ACCUMULATE micro-batches
    assert len(seen) == UPDATES * ACCUMULATE
    assert callback.monitor.config().batch_size == MICRO


def test_token_accuracy_and_counts_match_a_computation_by_hand(trained: tuple) -> None:
    callback, _, seen, _ = trained
    trace = callback.monitor.trace()
    accs, counted, padding = [], [], []
    for logits, labels, mask in seen[ACCUMULATE - 1 :: ACCUMULATE]:  # each update's last
        pred, target, real = logits[:, :-1].argmax(-1), labels[:, 1:], mask[:, :-1]
        keep = target != -100
        accs.append(float((pred[keep] == target[keep]).double().mean()))
        counted.append(int(keep.sum()) / target.numel())
        padding.append(int((real == 0).sum()) / target.numel())
    np.testing.assert_allclose(trace.batch_acc, accs)
    np.testing.assert_allclose(trace.counted_share, counted)
    np.testing.assert_allclose(trace.padding_share, padding)
    assert (trace.padding_counted_share == 0).all()  # the labels mask the padding


def test_the_loss_is_the_per_token_mean_over_an_updates_micro_batches(trained: tuple) -> None:
    callback, _, seen, _ = trained
    trace = callback.monitor.trace()
    first = seen[:ACCUMULATE]
    total = sum(
        torch.nn.functional.cross_entropy(
            lg[:, :-1].reshape(-1, VOCAB), lb[:, 1:].reshape(-1), reduction="sum"
        )
        for lg, lb, _ in first
    )
    count = sum(int((lb[:, 1:] != -100).sum()) for _, lb, _ in first)
    assert trace.loss[0] == pytest.approx(float(total) / count, rel=1e-6)


def test_layers_and_attention_are_recorded(trained: tuple) -> None:
    callback, _, _, model = trained
    trace = callback.monitor.trace()
    assert (trace.grad_norm["transformer.wte"] > 0).all()  # the embedding, tied to lm_head
    # GPT-2's attention is causal: nothing of a row's weight lands on a later position.
    assert set(trace.attention_future) == {"transformer.h.0.attn", "transformer.h.1.attn"}
    assert all((v == 0).all() for v in trace.attention_future.values())
    assert all((v > 0).all() for v in trace.attention_entropy.values())
    hooks = [h for m in model.modules() for h in m._forward_hooks.values()]
    ours = [h for h in hooks if "faultbench" in getattr(h, "__module__", "") + repr(h)]
    assert not ours  # the callback's and the Monitor's hooks are gone


def test_report_printed_at_the_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    callback = FaultbenchCallback(every=2)
    _train(tmp_path, callback)
    printed = capsys.readouterr().out
    assert callback.report is not None and str(callback.report) in printed
    assert "diagnosis: " in printed and "upgrade checklist" in printed
