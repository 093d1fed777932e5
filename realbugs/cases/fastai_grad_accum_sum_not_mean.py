"""fastai's GradientAccumulation added the micro-batches' gradients without dividing: the
loss exploded after a while."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/fastai/fastai/issues/3023"
REPORTED = (
    "With the GradientAccumulation callback (10 batches accumulated) the loss and the "
    "gradients suddenly exploded after a while; without accumulation they did not, and fewer "
    "accumulated batches or a lower rate only delayed it (the callback's author, in fastai2 "
    "pull request 194, which this issue links)."
)
DIAGNOSIS = (
    "The callback did not scale the loss by the number of accumulated batches, so the "
    "gradients were summed, not averaged: the update was as many times too large as batches "
    "were accumulated, as if the rate were multiplied. The fix divides each batch's loss by "
    "the number of batches accumulated."
)
LABEL = "loss_normalization"
MODEL = "recurrent"
OPTIMIZER = "SGD"
DATA = (
    "Generated text (a peaked Markov chain over 20 tokens, rows of 20) and a 1-layer GRU "
    "language model (width 48) stand in for the reporter's model; SGD with momentum stands in "
    "for fastai's optimizer, since the summed gradient only changes an optimizer that is not "
    "scale-invariant. 10 micro-batches of 8 are accumulated per update (one forward of the 80 "
    "rows, the micro-batch losses summed, the same gradient). Accuracies are next-token "
    "accuracy."
)
SYMPTOM = Symptom("loss_rebound", above=1.5)  # the loss explodes after a while
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.536,
    (
        "the Markov chain's own best guess of each next token (lm_kit.best_guess_accuracy) on"
        " the case's generated rows: 0.536"
    ),
)
EPOCHS = 6
FIDELITY_DATA = "stand-in: generated Markov-chain text"
FIDELITY_MODEL = "stand-in: a 1-layer GRU language model"
FIDELITY_CODE = "stand-in: our loop; the accumulated micro-batch losses summed, not averaged"
REPORTED_EFFECT = "loss and gradients explode after a while with 10 batches accumulated"
REENACTED_EFFECT = "loss ends 5.4 times its lowest, validation loss 15; the twin's at its lowest"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue thread and fastai2 pull request 194 it links (stored issues corpus): the "
        "callback's losses were not scaled by the number of accumulated batches, so gradients "
        "were summed; the callback's author saw the loss and gradients explode with 10 batches "
        "accumulated."
    ),
    label=("matches: micro-batch losses summed undivided is the registry's loss_normalization."),
    mechanism=(
        "matches: the accumulated losses summed, the twin divides by their count, on a stand-in "
        "GRU language model."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, CONTEXT, WIDTH, ACCUMULATE, MICRO = 24, 20, 48, 10, 8


class GRULanguageModel(nn.Module):
    """Embedding, one GRU layer, next-token scores."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.rnn = nn.GRU(WIDTH, WIDTH, batch_first=True)
        self.out = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(ids))[0])


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """SGD with momentum; each update accumulates ACCUMULATE micro-batches."""
    kit.seed_everything(SEED)
    tokens = lm_kit.documents(SEED, 1200, CONTEXT, vocab=VOCAB)
    labels = lm_kit.next_labels(tokens)
    train, val = slice(0, 1040), slice(1040, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        micro = [
            F.cross_entropy(
                logits[i : i + MICRO].reshape(-1, VOCAB), target[i : i + MICRO].reshape(-1)
            )
            for i in range(0, len(target), MICRO)
        ]
        summed = torch.stack(micro).sum()  # each micro-batch's backward adds its gradient
        return summed / len(micro) if fixed else summed  # the fix: divide by the count

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return GRULanguageModel()

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    data = torch.utils.data.TensorDataset(tokens[train], labels[train])
    loader = kit.batches_of(data, ACCUMULATE * MICRO)
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
