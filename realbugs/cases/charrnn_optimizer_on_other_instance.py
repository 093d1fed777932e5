"""practical-pytorch's char-RNN with optimizer.step(): loss stays big and fluctuates, never
diminishes."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/spro/practical-pytorch/issues/9"
REPORTED = (
    "Replacing the tutorial's manual update with optim.SGD(rnn.parameters(), lr=0.005) and "
    "optimizer.step(), the loss is big and goes up and down without diminishing."
)
DIAGNOSIS = (
    "The notebook instantiates the model twice: the optimizer was built on the first "
    "instance's parameters, while the loop trains the second, so its weights never change; "
    "building the optimizer after the second instantiation fixed it (the maintainer's fix)."
)
LABEL = "frozen_layer"
MODEL = "recurrent"
OPTIMIZER = "SGD"
DATA = (
    "Generated names from 6 made-up 'languages' (each its own letter frequencies and endings) "
    "stand in for the 18 languages' name lists; the tutorial's RNN (i2h and i2o on the "
    "concatenated input and hidden), one name per step, NLLLoss."
)
SYMPTOM = Symptom("loss_ratio", above=0.9)  # the loss does not diminish
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    1.0, "the rule that made the data: each made-up language's two-letter ending (1.000)"
)
FIDELITY_DATA = "stand-in: names from 6 made-up languages for the 18 languages' name lists"
FIDELITY_MODEL = OWN
FIDELITY_CODE = OWN
REPORTED_EFFECT = "none given: the loss is big and goes up and down without diminishing"
REENACTED_EFFECT = (
    "the loss ends at 0.995 of its start, validation accuracy 0.295; the twin's loss ends at "
    "0.49 and it validates at 1.000"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 1  # one pass over the names
LETTERS = "abcdefghijklmnopqrstuvwxyz"
LANGUAGES = 6


def names(seed: int, n: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """One-hot letter sequences (1, length, 26) and their language."""
    rng = np.random.default_rng(seed)
    freqs = rng.dirichlet(np.full(26, 0.3), size=LANGUAGES)
    endings = rng.integers(0, 26, size=(LANGUAGES, 2))
    lines, labels = [], rng.integers(0, LANGUAGES, size=n)
    for lang in labels:
        letters = list(rng.choice(26, size=rng.integers(3, 8), p=freqs[lang])) + list(endings[lang])
        line = torch.zeros(1, len(letters), 26)
        line[0, torch.arange(len(letters)), torch.tensor(letters)] = 1.0
        lines.append(line)
    return lines, torch.from_numpy(labels.astype(np.int64))


class RNN(nn.Module):
    """The tutorial's RNN, reading a whole line (batch, length, letters) in forward."""

    def __init__(self, input_size: int, hidden_size: int, output_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.i2o = nn.Linear(input_size + hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, line_tensor: torch.Tensor) -> torch.Tensor:
        hidden = torch.zeros(line_tensor.size(0), self.hidden_size)
        for i in range(line_tensor.size(1)):
            combined = torch.cat((line_tensor[:, i], hidden), 1)
            hidden = self.i2h(combined)
            output = self.softmax(self.i2o(combined))
        return output


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The tutorial's train(category_tensor, line_tensor), one random name at a time."""
    kit.seed_everything(SEED)
    lines, categories = names(SEED, 1200)
    n_hidden = 128

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return RNN(26, n_hidden, LANGUAGES)

    rnn = make_model()
    optimizer = torch.optim.SGD(rnn.parameters(), lr=0.005)
    if not fixed:
        rnn = make_model()  # the notebook's second `rnn = RNN(...)`, below the optimizer
    criterion = nn.NLLLoss()
    padded = nn.utils.rnn.pad_sequence([line[0] for line in lines[:256]], batch_first=True)

    def accuracy(start: int, stop: int) -> float:
        with torch.no_grad():
            hits = [int(rnn(lines[i]).argmax(1) == categories[i]) for i in range(start, stop)]
        return float(np.mean(hits))

    monitor = Monitor(rnn, optimizer, every=1)
    order = np.random.default_rng(SEED).permutation(1000)
    for _epoch in range(epochs):
        pairs = ((lines[i], categories[i : i + 1]) for i in order)
        for line_tensor, category_tensor in monitor.batches(pairs):
            optimizer.zero_grad()
            output = rnn(line_tensor)
            loss = criterion(output, category_tensor)
            loss.backward()
            optimizer.step()
            monitor.step(loss, output, category_tensor)
        monitor.log_eval(train_acc=accuracy(0, 1000), val_acc=accuracy(1000, 1200))
    return kit.finish(
        monitor, make_model=make_model, loss_fn=criterion, X=padded, y=categories[:256]
    )
