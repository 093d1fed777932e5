"""A tutorial's neural net ends in a Softmax layer and trains with CrossEntropyLoss, which
applies log-softmax again."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/vinhkhuc/PyTorch-Mini-Tutorials/issues/1"
REPORTED = (
    "torch.nn.CrossEntropyLoss combines LogSoftMax and NLLLoss, so the softmax module the "
    "tutorials add at the end of their models should not be there."
)
DIAGNOSIS = (
    "The loss is handed probabilities where it expects scores, so it takes a softmax of a "
    "softmax; the maintainer checked CrossEntropyLoss and removed the Softmax layers from "
    "the tutorials (commit f32192e)."
)
LABEL = "softmax_before_loss"
MODEL = "mlp"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits (64 pixels) stand in for MNIST's 784; the tutorial's "
    "3_neural_net.py otherwise: Linear(512, no bias), sigmoid, Linear(10, no bias), Softmax, "
    "CrossEntropyLoss, SGD at 0.01 with momentum 0.9, batches of 100 taken in order, for 30 "
    "of its 100 epochs. No failure was reported (read from the code): the symptom, a loss "
    "that barely moves, is the suite's choice."
)
SYMPTOM = Symptom("loss_ratio", above=0.8)  # the loss barely moves
SEED = 42
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for MNIST"
FIDELITY_MODEL = "stand-in: the tutorial's network with 64 inputs instead of 784"
FIDELITY_CODE = "source's own"
REPORTED_EFFECT = "none given: the softmax layer is redundant (read from the code)"
REENACTED_EFFECT = (
    "after 30 epochs the loss is at 0.99 of its start and validation accuracy 0.242; the twin's "
    "loss ends at 0.37 and it validates at 0.911"
)
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): CrossEntropyLoss combines LogSoftMax and NLLLoss, so "
        "may the softmax module be removed; the maintainer checked and agreed the softmax layer "
        "is unnecessary; the commit that removed it was not read."
    ),
    label=(
        "matches: nn.Softmax before CrossEntropyLoss is the registry's "
        "softmax_before_loss.softmax_module."
    ),
    mechanism=(
        "matches: the tutorial's network ending in a softmax, the twin without it, on digits for "
        "MNIST."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 30
BATCH = 100


def build_model(input_dim: int, output_dim: int, *, softmax: bool) -> nn.Sequential:
    """3_neural_net.build_model."""
    model = nn.Sequential()
    model.add_module("linear_1", nn.Linear(input_dim, 512, bias=False))
    model.add_module("sigmoid_1", nn.Sigmoid())
    model.add_module("linear_2", nn.Linear(512, output_dim, bias=False))
    if softmax:
        model.add_module("softmax", nn.Softmax(dim=1))
    return model


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """main(): batches in order, accuracy on the test split after each epoch."""
    kit.seed_everything(SEED)
    trX, trY, teX, teY = kit.digits(seed=0)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return build_model(64, 10, softmax=not fixed)

    model = make_model()
    loss = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    n_examples = len(trY)
    monitor = Monitor(model, optimizer, every=1)
    for _i in range(epochs):
        batches = (
            (trX[k * BATCH : (k + 1) * BATCH], trY[k * BATCH : (k + 1) * BATCH])
            for k in range(n_examples // BATCH)
        )
        for x, y in monitor.batches(batches):
            optimizer.zero_grad()
            fx = model(x)
            output = loss(fx, y)
            output.backward()
            optimizer.step()
            monitor.step(output, fx, y)
        monitor.log_eval(
            train_acc=kit.accuracy(model, trX, trY),
            val_acc=kit.accuracy(model, teX, teY),
            val_loss=kit.mean_loss(model, loss, teX, teY),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss, X=trX, y=trY)
