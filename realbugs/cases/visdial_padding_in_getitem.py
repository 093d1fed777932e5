"""A visual-dialog dataset pads every question, answer and the dialog's history inside
__getitem__, item by item: the training steps wait on it."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/batra-mlp-lab/visdial-challenge-starter-pytorch/issues/25"
REPORTED = (
    "The training step is particularly slow; the dataset does too much work in __getitem__ "
    "(padding the sequences, building each round's history) instead of once in __init__."
)
DIAGNOSIS = (
    "The maintainers agreed that doing the padding and the history once in __init__ should "
    "definitely lead to a significant speed-up, at the cost of memory (their design "
    "choice): with the per-item work the loader, not the model, sets the pace."
)
LABEL = "starved_loader"
MODEL = "embedding"
OPTIMIZER = "Adam"
DATA = (
    "Generated dialogs (10 rounds of a question and an answer, 40-word vocabulary; the "
    "target is the round's answer class, set by the question's first word) stand in for "
    "VisDial, and a bag-of-embeddings scorer for the late "
    "fusion encoder. __getitem__ pads the question and rebuilds and pads the concatenated "
    "history token by token, as the starter code's dataset does per item; the fix does it "
    "once for every item in __init__."
)
SYMPTOM = Symptom("wait_share", above=0.5)  # most of each step waits for the batch
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(1.0, "the rule that made the answers (the question's first word): 1.000")
FIDELITY_DATA = "stand-in: generated dialogs for VisDial"
FIDELITY_MODEL = "stand-in: a bag-of-embeddings scorer for the late fusion encoder"
FIDELITY_CODE = "stand-in: a plain classification loop with Adam"
REPORTED_EFFECT = "none given: the training step is 'particularly slow'"
REENACTED_EFFECT = (
    "64% of each step spent waiting for the batch; the precomputed twin waits 12% and learns "
    "the same (validation 1.000)"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): training particularly slow, padding and history built "
        "in __getitem__; one maintainer: moving them to __init__ should give a significant "
        "speed-up; another: a design choice for memory, the work overlapped by loader workers "
        "with the forward pass."
    ),
    label="matches: a step that waits for per-item work in the loader is starved_loader.",
    mechanism=(
        "partly: the per-item work is the source's, but the case's DataLoader has no workers "
        "(num_workers 0), where the repository's overlap it with the forward pass, as a "
        "maintainer notes."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 3
VOCAB, ROUNDS, QLEN, ALEN, ANSWERS, DIALOGS = 40, 10, 6, 4, 8, 120
HISTORY = ROUNDS * (QLEN + ALEN)  # the padded history's length


def dialogs(seed: int) -> tuple[list, np.ndarray]:
    """Per dialog and round: question and answer tokens; and each round's answer class."""
    rng = np.random.default_rng(seed)
    text, classes = [], np.zeros((DIALOGS, ROUNDS), dtype=np.int64)
    for d in range(DIALOGS):
        rounds = []
        for r in range(ROUNDS):
            question = [int(t) for t in rng.integers(1, VOCAB, size=rng.integers(2, QLEN + 1))]
            classes[d, r] = question[0] % ANSWERS
            answer = [int(classes[d, r]) + 1] + [int(t) for t in rng.integers(1, VOCAB, size=2)]
            rounds.append((question, answer))
        text.append(rounds)
    return text, classes


def pad(tokens: list[int], length: int) -> torch.Tensor:
    """One sequence padded with 0 to ``length``, token by token (the dataset's _pad_sequences)."""
    out = torch.zeros(length, dtype=torch.long)
    for i, token in enumerate(tokens[:length]):
        out[i] = token
    return out


class DialogDataset(torch.utils.data.Dataset):
    """Items are (dialog, round): the padded question and history, and the answer class."""

    def __init__(self, text: list, classes: np.ndarray, *, precompute: bool) -> None:
        self.text, self.classes = text, classes
        self.items = [(d, r) for d in range(len(text)) for r in range(ROUNDS)]
        self.ready = [self.build(i) for i in range(len(self.items))] if precompute else None

    def build(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        d, r = self.items[index]
        history: list[int] = []
        for question, answer in self.text[d][:r]:
            history += question + answer
        tokens = torch.cat([pad(self.text[d][r][0], QLEN), pad(history, HISTORY)])
        return tokens, torch.tensor(self.classes[d, r])

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.ready[index] if self.ready is not None else self.build(index)


class BagScorer(nn.Module):
    """Embeds the question's words and the history's last answer word, then scores."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB + 1, 32, padding_idx=0)
        self.head = nn.Sequential(nn.Linear(QLEN * 32 + 32, 64), nn.ReLU(), nn.Linear(64, ANSWERS))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        question = self.embed(tokens[:, :QLEN]).flatten(1)
        history = self.embed(tokens[:, QLEN:])
        last = (tokens[:, QLEN:] > 0).sum(1) - ALEN + 1  # the previous answer's class token
        previous = history[torch.arange(len(tokens)), last.clamp(min=0)]
        return self.head(torch.cat([question, previous], dim=1))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """DataLoader over the items; accuracy on held-out dialogs after each epoch."""
    kit.seed_everything(SEED)
    text, classes = dialogs(SEED)
    train_set = DialogDataset(text[:100], classes[:100], precompute=fixed)
    held = DialogDataset(text[100:], classes[100:], precompute=True)
    val_x = torch.stack([held[i][0] for i in range(len(held))])
    val_y = torch.stack([held[i][1] for i in range(len(held))])
    probe = DialogDataset(text[:20], classes[:20], precompute=True)
    train_x = torch.stack([probe[i][0] for i in range(len(probe))])
    train_y = torch.stack([probe[i][1] for i in range(len(probe))])

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return BagScorer()

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    loader = torch.utils.data.DataLoader(train_set, batch_size=32, shuffle=True)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for tokens, target in monitor.batches(loader):
            optimizer.zero_grad()
            scores = model(tokens)
            loss = criterion(scores, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, scores, target)
        monitor.log_eval(
            train_acc=kit.accuracy(model, train_x, train_y),
            val_acc=kit.accuracy(model, val_x, val_y),
            val_loss=kit.mean_loss(model, criterion, val_x, val_y),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=train_x, y=train_y)
