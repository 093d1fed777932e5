"""axolotl's pretraining without sample packing counted the padding in the loss."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/axolotl-ai-cloud/axolotl/pull/2227"
REPORTED = (
    "Pretraining without sample packing, the loss was computed over the padding tokens too "
    "(the maintainer's fix, 'make sure padding is labeled as -100 for pretraining')."
)
DIAGNOSIS = (
    "Without packing each document is padded to the sequence length, and the labels copied "
    "from the input ids kept the pad ids, so the loss also trained the model to predict "
    "padding after padding; the merged fix labels the padding -100."
)
LABEL = "unmasked_loss"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated documents (a peaked Markov chain over 20 tokens, 4 to 24 tokens long, <eos> "
    "after each) right-padded to 28 tokens stand in for the pretraining stream; the toy "
    "nanoGPT-sized decoder (2 layers, width 32) stands in for the model axolotl trains. "
    "Accuracies are next-token accuracy on the documents' real tokens. The pull request "
    "reports no run: the symptom is the suite's choice, the training loss deflated by the "
    "padding's easy predictions (the documents are learned alike)."
)
SYMPTOM = Symptom("min_loss", below=1.0)  # the padding's easy tokens deflate the loss
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.538,
    (
        "the Markov chain's own best guess of each next token (lm_kit.best_guess_accuracy) on"
        " the case's generated rows: 0.538"
    ),
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated Markov-chain documents for the pretraining stream"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder for axolotl's models"
FIDELITY_CODE = "stand-in: our loop; labels copied from the padded input ids"
REPORTED_EFFECT = "none given: the loss covered the padding (fixed from reading the code)"
REENACTED_EFFECT = "training loss 0.68 against the twin's 1.46; next-token accuracy 0.50 vs 0.49"
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the merged pull request's description (stored issues corpus): pretraining without sample"
        " packing computed the loss over the padding tokens too; its diff was not read."
    ),
    label="matches: a loss that counts padding tokens is the registry's unmasked_loss.",
    mechanism=(
        "matches: labels copied from padded ids, the fix labels the padding -100, on generated "
        "documents and a small decoder."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, CONTEXT = 24, 28


def padded_documents(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Documents of 4..24 tokens then <eos>, right-padded with PAD; and their lengths."""
    text = lm_kit.documents(seed, n, CONTEXT, vocab=VOCAB)
    lengths = torch.from_numpy(np.random.default_rng(seed + 2).integers(4, 25, n))
    position = torch.arange(CONTEXT)[None, :]
    text = text.masked_fill(position == lengths[:, None], lm_kit.EOS)
    return text.masked_fill(position > lengths[:, None], lm_kit.PAD), lengths + 1


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """labels = input_ids, shifted next-token loss, AdamW."""
    kit.seed_everything(SEED)
    tokens, lengths = padded_documents(SEED, 1200)
    padding = torch.arange(CONTEXT)[None, :] >= lengths[:, None]
    labels = tokens.masked_fill(padding, lm_kit.IGNORE) if fixed else tokens.clone()
    real = lm_kit.next_labels(tokens.masked_fill(padding, lm_kit.IGNORE))  # for evaluation
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        shifted = lm_kit.next_labels(target)
        return F.cross_entropy(logits.reshape(-1, VOCAB), shifted.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, CONTEXT)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    mask = (~padding).long()
    data = torch.utils.data.TensorDataset(tokens[train], mask[train], labels[train])
    loader = kit.batches_of(data, 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, attention, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, lm_kit.next_labels(target), mask=attention)
        val_loss, val_acc = lm_kit.next_token_scores(model, tokens[val], real[val])
        monitor.log_eval(
            train_acc=lm_kit.next_token_scores(model, tokens[:200], real[:200])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=labels[train]
    )
