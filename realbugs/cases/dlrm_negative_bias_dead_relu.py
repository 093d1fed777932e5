"""DLRM's bias initialization can start a ReLU far below zero: its output is all 0, no gradient
flows."""

import itertools

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/pytorch/benchmark/pull/1927"
REPORTED = (
    "Training the dlrm benchmark, the model's output after its last ReLU is 0 for every "
    "example, and the derivative with respect to the first linear layer is all zeros."
)
DIAGNOSIS = (
    "The layers' biases were drawn from a normal distribution of standard deviation "
    "sqrt(1/m), which can put a bias far below zero and kill the ReLU after it; the fix uses "
    "Xavier initialization with zero biases."
)
LABEL = "dead_units"
MODEL = "embedding"
OPTIMIZER = "SGD"
DATA = (
    "Generated click logs (13 dense features, 3 categorical ones of 100 values each, clicks "
    "from a hidden logistic model) stand in for Criteo Kaggle; the model is DLRM's layout at "
    "toy size (bottom MLP 13-16-8, three 8-dimensional embeddings, dot interactions, top MLP "
    "with a ReLU output, as in the benchmark's run) with DLRM's own initialization and its "
    "two inputs (dense features; categorical ids, one per table). SEED is the "
    "first seed, counting from 0, whose draw puts the output unit's bias below its inputs, as "
    "the benchmark's run did."
)
SYMPTOM = Symptom("weight_change", below=1e-9, layer="bot_l.0")  # the first layer never moves
SEED = 23
KIND = "binary"
REFERENCE = Reference(
    0.827,
    (
        "scikit-learn's LogisticRegression on the dense features and one-hot categories "
        "(measured: 0.827)"
    ),
)
FIDELITY_DATA = "stand-in: generated click logs for Criteo Kaggle"
FIDELITY_MODEL = "stand-in: DLRM's layout at toy size"
FIDELITY_CODE = "stand-in: a plain loop with MSE and SGD at 0.1"
REPORTED_EFFECT = (
    "every output 0 and a zero gradient for the first layer; after the fix nonzero outputs "
    "and gradients"
)
REENACTED_EFFECT = (
    "the first layer changes by 0 and accuracy stays at 0.472; the twin's first layer moves "
    "(0.32) and it validates at 0.807"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 10
DENSE, TABLES, ROWS, DIM = 13, 3, 100, 8


def clicks(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dense features, categorical ids (one column per table) and clicks."""
    rng = np.random.default_rng(seed)
    dense = rng.lognormal(0.0, 1.0, size=(n, DENSE)).astype(np.float32)
    sparse = rng.integers(0, ROWS, size=(n, TABLES))
    effect = rng.normal(0, 0.5, size=(TABLES, ROWS))
    logit = np.log1p(dense) @ rng.normal(0, 1.5, DENSE) + effect[np.arange(TABLES), sparse].sum(1)
    logit -= np.median(logit)  # as many clicks as not
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return torch.from_numpy(np.log1p(dense)), torch.from_numpy(sparse), torch.from_numpy(y)


class DLRM(nn.Module):
    """Bottom MLP for dense features, embeddings for categorical ones, dot interactions, top MLP;
    two inputs, as dlrm_s_pytorch's forward(dense_x, lS_o, lS_i) (one id per table here)."""

    def __init__(self, *, xavier: bool) -> None:
        super().__init__()
        self.xavier = xavier
        self.bot_l = self.create_mlp([DENSE, 16, DIM])
        self.emb_l = nn.ModuleList(nn.EmbeddingBag(ROWS, DIM, mode="sum") for _ in range(TABLES))
        interactions = (TABLES + 1) * TABLES // 2
        self.top_l = self.create_mlp([DIM + interactions, 16, 1])

    def create_mlp(self, ln: list[int]) -> nn.Sequential:
        layers: list[nn.Module] = []
        for n, m in itertools.pairwise(ln):
            LL = nn.Linear(n, m, bias=True)
            if self.xavier:  # the fix
                nn.init.xavier_normal_(LL.weight)
                nn.init.zeros_(LL.bias)
            else:  # dlrm_s_pytorch.create_mlp
                W = np.random.normal(0.0, np.sqrt(2 / (m + n)), size=(m, n)).astype(np.float32)
                bt = np.random.normal(0.0, np.sqrt(1 / m), size=m).astype(np.float32)
                LL.weight.data = torch.tensor(W, requires_grad=True)
                LL.bias.data = torch.tensor(bt, requires_grad=True)
            layers += [LL, nn.ReLU()]
        return nn.Sequential(*layers)

    def forward(self, dense_x: torch.Tensor, lS_i: torch.Tensor) -> torch.Tensor:
        x = self.bot_l(dense_x)
        ly = [emb(lS_i[:, k : k + 1]) for k, emb in enumerate(self.emb_l)]
        T = torch.stack([x, *ly], dim=1)
        Z = torch.bmm(T, T.transpose(1, 2))
        li, lj = torch.tril_indices(TABLES + 1, TABLES + 1, offset=-1)
        return self.top_l(torch.cat([x, Z[:, li, lj]], dim=1)).squeeze(1)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train with MSE on clicks and SGD, as dlrm_s_pytorch's defaults do."""
    kit.seed_everything(SEED)
    dense, sparse, y = clicks(SEED, 3000)

    def make_model() -> nn.Module:
        kit.seed_everything(SEED)
        return DLRM(xavier=fixed)

    dlrm = make_model()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(dlrm.parameters(), lr=0.1)
    train = [(dense[i : i + 64], sparse[i : i + 64], y[i : i + 64]) for i in range(0, 2400, 64)]
    seen, held = (dense[:2400], sparse[:2400]), (dense[2400:], sparse[2400:])

    def click_accuracy(inputs: tuple[torch.Tensor, torch.Tensor], target: torch.Tensor) -> float:
        with torch.no_grad():
            return float(((dlrm(*inputs) > 0.5).float() == target).float().mean())

    monitor = Monitor(dlrm, optimizer, every=1)
    for _epoch in range(epochs):
        for dense_x, lS_i, T in monitor.batches(train):
            Z = dlrm(dense_x, lS_i)
            E = loss_fn(Z, T)
            optimizer.zero_grad()
            E.backward()
            optimizer.step()
            monitor.step(E)
        monitor.log_eval(
            train_acc=click_accuracy(seen, y[:2400]),
            val_acc=click_accuracy(held, y[2400:]),
            val_loss=kit.mean_loss(dlrm, loss_fn, held, y[2400:]),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=seen, y=y[:2400])
