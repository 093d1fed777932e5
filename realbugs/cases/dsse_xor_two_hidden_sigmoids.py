"""XOR with two hidden sigmoid units and weights drawn in (-1, 1): training settles short of
the four answers; with four hidden units it converges."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit

SOURCE = "https://datascience.stackexchange.com/questions/11589"
REPORTED = (
    "A 2-layer network for XOR (2 inputs, 2 hidden logistic units, 1 output, each layer with "
    "a bias, backpropagation, weights drawn in (-1, 1)) does not converge, or only for some "
    "initial weights; with 4 hidden units, or a second hidden layer, it converges."
)
DIAGNOSIS = (
    "The accepted answer: two hidden units can represent XOR, but from such initial weights "
    "training often ends in one of the local minima of this small network; the reporter's "
    "wider hidden layer (4 units) converges reliably."
)
LABEL = "too_small_model"
MODEL = "mlp"
OPTIMIZER = "SGD"
DATA = (
    "The question's own data (the four XOR rows) and network (2-2-1, logistic units, "
    "biases, weights uniform in (-1, 1)), trained by backpropagation on the squared error of "
    "the whole table, at a rate of 0.5 for 2,000 epochs (the question gives neither). SEED "
    "is the first seed, counting from 0, whose draw does not converge with two hidden units. "
    "The fix widens the hidden layer to 4; accuracy is measured on the four rows."
)
SYMPTOM = Symptom("final_val_acc", below=0.9)  # not all four answers right
SEED = 0
KIND = "binary"
REFERENCE = Reference(1.0, "the XOR table itself, which a 2-2-1 network can represent: 1.000")
FIDELITY_DATA = OWN
FIDELITY_MODEL = OWN
FIDELITY_CODE = "stand-in: squared error and plain gradient descent at 0.5 for the unstated rate"
REPORTED_EFFECT = "none given: it does not converge, for some initial weights"
REENACTED_EFFECT = (
    "accuracy 0.50 after 2,000 epochs, the loss at 0.99 of its start; with 4 hidden units 1.00 "
    "(over seeds 0 to 11, 8 of 12 draws miss a row with 2 units, none with 4)"
)
OBSERVED = True
EPOCHS = 2000


def xor_network(hidden: int) -> nn.Sequential:
    """Input, one hidden logistic layer, one logistic output; weights uniform in (-1, 1)."""
    first, second = nn.Linear(2, hidden), nn.Linear(hidden, 1)
    for layer in (first, second):
        nn.init.uniform_(layer.weight, -1.0, 1.0)
        nn.init.uniform_(layer.bias, -1.0, 1.0)
    return nn.Sequential(first, nn.Sigmoid(), second, nn.Sigmoid())


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Full-batch backpropagation on the truth table."""
    kit.seed_everything(SEED)
    X = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    y = torch.tensor([[0.0], [1.0], [1.0], [0.0]])

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return xor_network(4 if fixed else 2)

    net = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)

    def accuracy() -> float:
        with torch.no_grad():
            return float(((net(X) > 0.5).float() == y).float().mean())

    monitor = Monitor(net, optimizer, every=1)
    for epoch in range(epochs):
        for xb, yb in monitor.batches([(X, y)]):
            optimizer.zero_grad()
            loss = loss_fn(net(xb), yb)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
        if (epoch + 1) % 200 == 0:
            hits = accuracy()
            monitor.log_eval(train_acc=hits, val_acc=hits, val_loss=loss.item())
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X, y=y)
