"""Gemma 2's sliding-window layers built their mask by multiplying the additive mask: the
future became visible and the fine-tuning loss fell to 0."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/huggingface/transformers/issues/31673"
REPORTED = (
    "Fine-tuning Gemma 2 models, the training loss quickly dropped to 0, much like label leakage."
)
DIAGNOSIS = (
    "In the sliding-window layers the 4-d additive mask (0 where a key may be seen, the "
    "dtype's minimum where not) was multiplied by a lower-triangular matrix of ones as if it "
    "were a 2-d 0/1 mask: every entry inside the window and in the future became 0, so those "
    "layers attended to the tokens after each position. The fix (the reporter's pull request "
    "31674) keeps the causal mask and sets only the keys beyond the window to the minimum."
)
LABEL = "causal_mask_missing"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated text (a peaked Markov chain over 20 tokens, rows of 20 tokens) stands in for "
    "the reporter's fine-tuning set; a 2-layer Gemma-2-style decoder of width 32 built here, "
    "its first layer a sliding-window layer (window 4) and its second a global one, trained "
    "from scratch. Accuracies are next-token accuracy."
)
SYMPTOM = Symptom("min_loss", below=0.3)  # the loss falls to ~0
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.536,
    (
        "the Markov chain's own best guess of each next token (lm_kit.best_guess_accuracy) on"
        " the case's generated rows: 0.536"
    ),
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated Markov-chain text for the fine-tuning set"
FIDELITY_MODEL = "stand-in: a 2-layer Gemma-2-style decoder (one sliding, one global layer)"
FIDELITY_CODE = "stand-in: our attention; the sliding-window line is the reported one"
REPORTED_EFFECT = "training loss quickly drops to 0"
REENACTED_EFFECT = "training loss falls to 0.04 against the twin's floor of 1.26"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): the loss quickly dropping to 0 when fine-tuning Gemma "
        "2, like label leakage, and the decoder layer's line multiplying the additive mask by a "
        "lower-triangular matrix of ones; the fix's pull request 31674 was not read."
    ),
    label=(
        "matches: the sliding-window layers attend to later tokens, attention without its causal "
        "mask (causal_mask_missing)."
    ),
    mechanism=(
        "matches: the reported line re-enacted on a 2-layer Gemma-2-style decoder; the twin sets "
        "only the keys beyond the window to the minimum."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, CONTEXT, WIDTH, HEADS, WINDOW = 24, 20, 32, 4, 4


class Gemma2Attention(nn.Module):
    """Self-attention with Gemma 2's additive mask; even layers see a sliding window only."""

    def __init__(self, layer: int, fixed: bool) -> None:
        super().__init__()
        self.sliding, self.fixed = layer % 2 == 0, fixed
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, t, _ = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        lowest = torch.finfo(x.dtype).min
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        mask = torch.zeros(t, t).masked_fill(future, lowest)  # 0: may attend; min: may not
        if self.sliding:
            beyond = torch.tril(torch.ones_like(mask), diagonal=-WINDOW)
            # Fixed: mask the keys beyond the window and keep the causal mask. Faulty: the
            # additive mask treated as a 0/1 mask, so the future's minimum becomes 0.
            mask = torch.where(beyond.bool(), lowest, mask) if self.fixed else mask * beyond
        weights = ((q @ k.transpose(-1, -2)) / math.sqrt(WIDTH // HEADS) + mask).softmax(-1)
        out = (weights @ v).transpose(1, 2).reshape(n, t, WIDTH)
        return self.proj(out), weights


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Next-token loss over whole rows, AdamW."""
    kit.seed_everything(SEED)
    tokens = lm_kit.documents(SEED, 1200, CONTEXT, vocab=VOCAB)
    labels = lm_kit.next_labels(tokens)
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.Decoder(VOCAB, CONTEXT, attention, width=WIDTH)

    def attention(layer: int) -> nn.Module:
        return Gemma2Attention(layer, fixed)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(tokens[train], labels[train]), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, target)
        val_loss, val_acc = lm_kit.next_token_scores(model, tokens[val], labels[val])
        monitor.log_eval(
            train_acc=lm_kit.next_token_scores(model, tokens[:200], labels[:200])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=labels[train]
    )
