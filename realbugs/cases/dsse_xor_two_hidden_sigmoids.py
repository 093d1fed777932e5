"""XOR with two hidden sigmoid units and weights drawn in (-1, 1): training settles short of
the four answers; with four hidden units it converges.

Issue 51 relabelled it from ``too_small_model`` to ``other_fault``: a 2-2-1 network can
represent XOR (the question's first comment says so, and its accepted answer blames how the
weights are initialized: training from such draws ends in a local minimum), so the network
is not too narrow for what it must learn, the registry's definition of ``too_small_model``;
an unlucky draw stuck in a local minimum is none of the known faults."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://datascience.stackexchange.com/questions/11589"
REPORTED = (
    "A 2-layer network for XOR (2 inputs, 2 hidden logistic units, 1 output, each layer with "
    "a bias, backpropagation, weights drawn in (-1, 1)) does not converge, or only for some "
    "initial weights; with 4 hidden units, or a second hidden layer, it converges."
)
DIAGNOSIS = (
    "A comment: the 2-2-1 structure can represent XOR. The accepted answer: the reason is how "
    "the weights are initialized, training from them ending in one of the network's local "
    "minima. The reporter's wider hidden layer (4 units) converges: the twin."
)
# Not too_small_model: two units can represent XOR, and the answer blames the initial draw.
LABEL = "other_fault"
MODEL = "mlp"
OPTIMIZER = "SGD"
DATA = (
    "The question's own data (the four XOR rows) and network (2-2-1, logistic units, "
    "biases, weights uniform in (-1, 1)), trained by backpropagation on the squared error of "
    "the whole table, at a rate of 0.5 for 2,000 epochs (the question gives neither). SEED "
    "is the first seed, counting from 0, whose draw does not converge with two hidden units. "
    "The fix widens the hidden layer to 4, the reporter's own working network (the answer "
    "names no other initialization to use); accuracy is measured on the four rows."
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
SOURCE_CHECK = SourceCheck(
    read=(
        "the question, its comments and the start of the accepted answer (stored pages corpus): a"
        " comment says the 2-2-1 structure can predict XOR, the reporter that it converges for "
        "some draws only, the answer that the reason is the initialization (local minima)."
    ),
    label=(
        "matches: relabelled in issue 51 from too_small_model, which the registry defines as too "
        "narrow for what the model must learn; two units can represent XOR and the answer blames "
        "the initial draw, none of the known faults, so other_fault."
    ),
    mechanism=(
        "matches: the question's 2-2-1 logistic network with weights in (-1, 1) on the XOR table,"
        " stuck from an unconverging draw; the twin is the reporter's 4-unit network, which the "
        "question says converges."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
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
