"""Soup's interleaved datasets cycled the smaller source, then cut validation off the end:
the validation rows were copies of training rows."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit, lm_kit

SOURCE = "https://github.com/MakazhanAlpamys/Soup/issues/680"
REPORTED = (
    "With two fine-tuning datasets interleaved by oversampling, the validation split held "
    "rows that were also in the training split; the maintainer reproduced it through the "
    "public loader: at realistic ratios every validation row of the oversampled source is in "
    "training, and its validation loss looks good."
)
DIAGNOSIS = (
    "Interleaving with strategy 'over' cycles the smaller source up to the larger one's size, "
    "and the validation split is then a positional tail slice of the combined rows, with no "
    "de-duplication: the tail's rows of the cycled source are copies of rows earlier in the "
    "training part, so validation measures memorization. Splitting each source before "
    "oversampling keeps validation apart."
)
LABEL = "leaky_split"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Two generated fine-tuning sources: 600 instructions whose answer is the prompt through a "
    "substitution, and 200 whose one-token answer is arbitrary (learnable only by recall); "
    "the second is cycled to 600 and the two interleaved, 10% held for validation (the fixed "
    "form holds as many rows of each source, before cycling). The toy nanoGPT-sized decoder "
    "(2 layers, width 48) stands in for the model fine-tuned. The validation loss and "
    "accuracy are per answer token."
)
SYMPTOM = Symptom("final_val_loss", below=1.0)  # the cycled rows' answers are recalled
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
EPOCHS = 4
FIDELITY_DATA = "stand-in: two generated instruction sources"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder"
FIDELITY_CODE = "stand-in: our interleave, cycle and tail split, as the issue describes"
REPORTED_EFFECT = "none given: every validation row of the oversampled source also in training"
REENACTED_EFFECT = "validation loss 0.77 against the twin's 1.39"
OBSERVED = True
VOCAB, WIDTH, LARGE, SMALL, VAL_SHARE = 24, 16, 600, 200, 0.1


def interleave_over(large: lm_kit.Pairs, small: lm_kit.Pairs) -> lm_kit.Pairs:
    """The smaller source cycled to the larger's size, the two taken in turn."""
    cycled = small.rows(torch.arange(len(large)) % len(small))
    order = torch.stack([torch.arange(len(large)), len(large) + torch.arange(len(large))], 1)
    both = lm_kit.Pairs(
        torch.cat([large.tokens, cycled.tokens]),
        torch.cat([large.prompt, cycled.prompt]),
        torch.cat([large.length, cycled.length]),
        torch.cat([large.unit, cycled.unit + len(large)]),
    )
    return both.rows(order.reshape(-1))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Answer-only next-token loss over the interleaved training rows, AdamW."""
    kit.seed_everything(SEED)
    large = lm_kit.pairs(SEED, LARGE, vocab=VOCAB, width=WIDTH, words=(2, 4), rule="map")
    small = lm_kit.pairs(SEED + 1, SMALL, vocab=VOCAB, width=WIDTH, words=(2, 4), rule="noise")
    if fixed:  # each source split before oversampling: validation rows are never cycled
        # as many held rows of each source as the tail would hold
        held_large = held_small = round(LARGE * VAL_SHARE)
        train = interleave_over(
            large.rows(slice(held_large, None)), small.rows(slice(held_small, None))
        )
        val = lm_kit.Pairs(
            torch.cat([large.tokens[:held_large], small.tokens[:held_small]]),
            torch.cat([large.prompt[:held_large], small.prompt[:held_small]]),
            torch.cat([large.length[:held_large], small.length[:held_small]]),
            torch.arange(held_large + held_small),
        )
    else:  # interleave and cycle first, then the validation split is the tail
        rows = interleave_over(large, small)
        cut = round(len(rows) * (1 - VAL_SHARE))
        train, val = rows.rows(slice(0, cut)), rows.rows(slice(cut, None))
    shuffled = torch.randperm(len(train), generator=torch.Generator().manual_seed(SEED))
    train = train.rows(shuffled)
    labels, val_labels = lm_kit.answer_labels(train), lm_kit.answer_labels(val)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, WIDTH, width=48)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(train.tokens, labels), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, target)
        val_loss, val_acc = lm_kit.next_token_scores(model, val.tokens, val_labels)
        monitor.log_eval(
            train_acc=lm_kit.next_token_scores(model, train.tokens[:300], labels[:300])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=train.tokens, y=labels)
