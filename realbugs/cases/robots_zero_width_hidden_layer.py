"""A policy built with hidden_dims=(16, 0): a layer of width zero, one fixed action for every
state."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/strands-labs/robots/pull/3238"
REPORTED = (
    "Two policies trained identically except for hidden_dims: (16,) and (16, 0). Both runs "
    "report success, but the second one's action span over the observation range is exactly "
    "0.0: it commands one fixed action in every state."
)
DIAGNOSIS = (
    "nn.Linear accepts a width of zero; the zero-width layer emits an empty activation, and "
    "the layer after it emits its bias alone, so the output stops depending on the input; "
    "widths must be positive."
)
LABEL = "too_small_model"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "Behaviour cloning stands in for the RL run: a generated expert maps a 6-joint "
    "observation (uniform in [-5, 5] rad) to a 2-dimensional action (a smooth nonlinear "
    "function); the actor is the repository's MLP built from hidden_dims, trained by MSE. "
    "The fixed twin uses hidden_dims=(16, 16)."
)
SYMPTOM = Symptom("final_val_loss", above=0.8)  # no better than predicting the mean action
SEED = 0
KIND = "regression"
REFERENCE = Reference(
    0.877,
    "scikit-learn's MLPRegressor (64, 64 hidden) on the expert's training states, scored on "
    "the validation states: 0.877",
)
FIDELITY_DATA = "stand-in: a generated expert's states and actions for the RL episodes"
FIDELITY_MODEL = OWN
FIDELITY_CODE = "stand-in: behaviour cloning by MSE for the RL training"
REPORTED_EFFECT = "the (16, 0) policy's action span over the observation range is exactly 0.0"
REENACTED_EFFECT = (
    "validation R² -0.002 (one action for every state); the twin's 0.812 after 40 epochs"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 40


def build_mlp(inp: int, hidden_dims: tuple[int, ...], out: int) -> nn.Sequential:
    """The repository's MLP builder: Linear and ReLU per hidden width, then the output layer."""
    layers: list[nn.Module] = []
    for width in hidden_dims:
        layers += [nn.Linear(inp, width), nn.ReLU()]
        inp = width
    return nn.Sequential(*layers, nn.Linear(inp, out))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Fit the expert's actions; report the validation MSE each epoch."""
    kit.seed_everything(SEED)
    rng = np.random.default_rng(SEED)
    obs = rng.uniform(-5, 5, size=(2000, 6)).astype(np.float32)
    mix = rng.normal(0, 0.5, size=(6, 2))
    act = np.tanh(np.sin(obs) @ mix + 0.1 * obs @ mix)
    act = ((act - act.mean(0)) / act.std(0)).astype(np.float32)
    X, Y = torch.from_numpy(obs), torch.from_numpy(act)
    train_x, train_y, val_x, val_y = X[:1600], Y[:1600], X[1600:], Y[1600:]
    hidden_dims = (16, 16) if fixed else (16, 0)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return build_mlp(6, hidden_dims, 2)

    actor = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.Adam(actor.parameters(), lr=3e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(train_x, train_y), 64)
    monitor = Monitor(actor, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for o, a in monitor.batches(loader):
            optimizer.zero_grad()
            loss = loss_fn(actor(o), a)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
        kit.log_scores(
            monitor,
            actor,
            kind=KIND,
            train=(train_x, train_y),
            val=(val_x, val_y),
            val_loss=kit.mean_loss(actor, loss_fn, val_x, val_y),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=train_x, y=train_y)
