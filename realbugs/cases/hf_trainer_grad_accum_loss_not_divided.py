"""The Trainer did not divide a loss-kwargs-less model's loss by the accumulation steps: the
logged loss grew with gradient_accumulation_steps."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/huggingface/transformers/issues/37766"
REPORTED = (
    "With the Trainer (transformers 4.47.1), as gradient_accumulation_steps increased the "
    "training loss increased too, with no error or warning."
)
DIAGNOSIS = (
    "For a model whose forward does not accept the loss kwargs, each micro-batch's loss is "
    "the mean over its own forward pass, and the Trainer, expecting a loss already divided by "
    "the items of the whole accumulated batch, did not divide it by the accumulation steps: "
    "the accumulated loss, and its gradient, were the sum over the micro-batches. A "
    "maintainer confirmed; training still works, but not as it should."
)
LABEL = "loss_normalization"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated text (a peaked Markov chain over 20 tokens, rows of 20 tokens) stands in for "
    "the reporter's data; the toy nanoGPT-sized decoder (2 layers, width 32), whose forward "
    "takes no loss kwargs. 4 micro-batches of 8 are accumulated per update with the Trainer's "
    "clipping at norm 1 (one forward of the 32 rows, the micro-batch losses summed or "
    "averaged, the same gradient). Accuracies are next-token accuracy."
)
SYMPTOM = Symptom("min_loss", above=3.0)  # the logged loss is 4 times the real one
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
FIDELITY_DATA = "stand-in: generated Markov-chain text"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder without loss kwargs"
FIDELITY_CODE = "stand-in: our loop; the Trainer's missing division re-enacted"
REPORTED_EFFECT = "none given: training loss grows with gradient_accumulation_steps"
REENACTED_EFFECT = "logged loss floor 5.0 against the twin's 1.27; next-token accuracy alike (0.53)"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): for a model without loss kwargs the loss is not "
        "divided by the items of the accumulated batch, so the loss grows with "
        "gradient_accumulation_steps and no error is raised; a maintainer agreed (training still "
        "works, not as precisely)."
    ),
    label=("matches: micro-batch losses left undivided across accumulation is loss_normalization."),
    mechanism="matches: the missing division by the accumulation steps, on a stand-in decoder.",
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, CONTEXT, ACCUMULATE, MICRO = 24, 20, 4, 8


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """AdamW, gradient clipping at 1.0, ACCUMULATE micro-batches per update."""
    kit.seed_everything(SEED)
    tokens = lm_kit.documents(SEED, 1200, CONTEXT, vocab=VOCAB)
    labels = lm_kit.next_labels(tokens)
    train, val = slice(0, 1024), slice(1024, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        micro = [
            F.cross_entropy(
                logits[i : i + MICRO].reshape(-1, VOCAB), target[i : i + MICRO].reshape(-1)
            )
            for i in range(0, len(target), MICRO)
        ]
        summed = torch.stack(micro).sum()
        return summed / ACCUMULATE if fixed else summed  # the missing division

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, CONTEXT)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.utils.data.TensorDataset(tokens[train], labels[train])
    loader = kit.batches_of(data, ACCUMULATE * MICRO)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
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
