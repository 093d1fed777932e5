"""LEAF's Shakespeare split sampled overlapping character windows into train and test: the
test windows were in the training set."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/TalwalkarLab/leaf/issues/19"
REPORTED = (
    "With the splitting method of the paper's experiments, the Shakespeare test samples "
    "appeared exactly in the training data (a role's lines cut into windows one character "
    "apart), and a 2-layer LSTM trained with SGD reached 100% test accuracy."
)
DIAGNOSIS = (
    "Each sample is an 80-character window sliding one character at a time over a role's "
    "lines; splitting the windows at random puts a test window's characters, and its target, "
    "inside the training windows next to it, so the test score measures recall of the "
    "training text. A split must keep the test text apart from the training text, such as the "
    "end of each role's lines after a gap of one window."
)
LABEL = "leaky_split"
MODEL = "recurrent"
OPTIMIZER = "Adam"
DATA = (
    "24 generated 'roles' of 100 characters (a Markov chain over 20 letters) cut into "
    "20-character windows one character apart stand in for the Shakespeare roles; a 1-layer "
    "LSTM (width 64) trained with Adam on every position's next character (faster to memorize "
    "than the report's last-character target with SGD). Accuracies are next-character "
    "accuracy on the test windows."
)
SYMPTOM = Symptom("final_val_acc", above=0.43)  # test accuracy too good to be true
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.408,
    (
        "the Markov chain's own best guess of each next token (lm_kit.best_guess_accuracy) on"
        " the case's generated rows: 0.408"
    ),
)
EPOCHS = 3
FIDELITY_DATA = "stand-in: generated Markov-chain 'roles' for Shakespeare's"
FIDELITY_MODEL = "stand-in: a 1-layer LSTM of width 64 for the 2-layer LSTM"
FIDELITY_CODE = "stand-in: our loop; windows split at random as the paper's script did"
REPORTED_EFFECT = "100% test accuracy"
REENACTED_EFFECT = "test next-character accuracy 0.48 against the twin's 0.37 (chain's best 0.41)"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue's report (stored issues corpus): with the paper's splitting method the test "
        "windows appear in the training data, one character apart, and a 2-layer LSTM reaches "
        "100% test accuracy; no fix is given in what was read."
    ),
    label="matches: a test set sharing its text with training is leaky_split.",
    mechanism=(
        "matches: windows one character apart split at random; the twin's split by position "
        "within each role is the case's, the thread gives none."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, ROLES, LENGTH, WINDOW, TEST_SHARE = 24, 24, 100, 20, 0.2


class CharLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.lstm = nn.LSTM(32, 64, batch_first=True)
        self.out = nn.Linear(64, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(self.embed(ids))[0])


def split(units: torch.Tensor, fixed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(train rows, test rows) of the windows."""
    rng = np.random.default_rng(SEED)
    if not fixed:  # the paper's script: windows drawn at random, whatever they overlap
        order = torch.from_numpy(rng.permutation(len(units)))
        cut = round(len(units) * TEST_SHARE)
        return order[cut:], order[:cut]
    # each role's last windows for test, a window's length after its last training window
    per_role = int((units == 0).sum())
    position = torch.arange(len(units)) % per_role
    first_test = round(per_role * (1 - TEST_SHARE))
    test = position >= first_test
    train = position < first_test - WINDOW
    return torch.nonzero(train)[:, 0][
        torch.from_numpy(rng.permutation(int(train.sum())))
    ], torch.nonzero(test)[:, 0]


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Next-character loss over the windows, Adam."""
    kit.seed_everything(SEED)
    roles = lm_kit.documents(SEED, ROLES, LENGTH, vocab=VOCAB, concentration=0.15)
    tokens, role = lm_kit.windows(roles, WINDOW, 1)
    labels = lm_kit.next_labels(tokens)
    train, test = split(role, fixed)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return CharLSTM()

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = kit.batches_of(torch.utils.data.TensorDataset(tokens[train], labels[train]), 64)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, target)
        val_loss, val_acc = lm_kit.next_token_scores(model, tokens[test], labels[test])
        monitor.log_eval(
            train_acc=lm_kit.next_token_scores(model, tokens[train[:300]], labels[train[:300]])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=labels[train]
    )
