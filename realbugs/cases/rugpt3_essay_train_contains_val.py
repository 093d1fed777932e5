"""ruGPT-3's essay example trained on a set that held all of its validation essays: the
perplexity was too good to be true."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/ai-forever/ru-gpts/issues/23"
REPORTED = (
    "The essay-generation example reported outstanding perplexities (8 and 3); checking for "
    "leakage, the reporter found that the training set contained all of the validation set."
)
DIAGNOSIS = (
    "Validation essays that the model also trains on measure memorization, not "
    "generalization, so the perplexity says nothing after more than one epoch. The "
    "maintainers agreed: it was a small example, and their other experiments, with a proper "
    "split, gave perplexities around 13 to 18."
)
LABEL = "leaky_split"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "30 generated 'essays' (100 tokens of a Markov chain over 20 tokens each) cut into "
    "20-token windows 4 apart; 6 essays are the validation set. The toy nanoGPT-sized decoder "
    "(2 layers, width 48) stands in for ruGPT-3, trained from scratch for 4 epochs. The "
    "validation loss and accuracy are next-token ones on the validation essays."
)
SYMPTOM = Symptom("final_val_loss", below=1.63)  # too good: the validation essays memorized
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.433,
    (
        "the Markov chain's own best guess of each next token (lm_kit.best_guess_accuracy) on"
        " the case's generated rows: 0.433"
    ),
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated Markov-chain essays for the essay corpus"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder for ruGPT-3"
FIDELITY_CODE = "stand-in: our loop; the training files include the validation essays"
REPORTED_EFFECT = "validation perplexities 8 and 3, against 13 to 18 with a proper split"
REENACTED_EFFECT = "validation loss 1.53 against the twin's 1.73 (perplexity 4.6 against 5.6)"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): perplexities 8 and 3 for essays, the training set "
        "containing all of the validation set; the maintainer: only a small example, other "
        "experiments give 13 to 18."
    ),
    label="matches: validation essays also trained on is leaky_split.",
    mechanism=(
        "matches: the training rows include the validation essays, the twin holds them out."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, ESSAYS, LENGTH, WINDOW, STRIDE, HELD = 24, 30, 100, 20, 4, 6


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Windows of the training essays, next-token loss, AdamW."""
    kit.seed_everything(SEED)
    essays = lm_kit.documents(SEED, ESSAYS, LENGTH, vocab=VOCAB, concentration=0.15)
    tokens, essay = lm_kit.windows(essays, WINDOW, STRIDE)
    labels = lm_kit.next_labels(tokens)
    held = essay >= ESSAYS - HELD  # the validation essays
    # Faulty: the training files hold every essay, the validation ones included.
    rows = torch.nonzero(~held if fixed else torch.ones_like(held))[:, 0]
    train = rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(SEED))]
    val = torch.nonzero(held)[:, 0]

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, WINDOW, width=48)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    data = torch.utils.data.TensorDataset(tokens[train], labels[train])
    loader = kit.batches_of(data, 32)
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
            train_acc=lm_kit.next_token_scores(model, tokens[train[:300]], labels[train[:300]])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=labels[train]
    )
