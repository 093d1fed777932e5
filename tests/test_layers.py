"""The layers' statistics: weights never given a gradient (a lookup table's rows the data
never used are not), and the updates of a run the Monitor resumes."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.training.monitor import Monitor

ROWS, WIDTH, USED = 40, 4, 10  # a table of 40 tokens, of which the data uses the first 10


class Tagger(nn.Module):
    """Token and position embeddings, then a linear layer scoring each position."""

    def __init__(self, positions: int = 2 * USED) -> None:
        super().__init__()
        self.tokens = nn.Embedding(ROWS, WIDTH)
        self.positions = nn.Embedding(positions, WIDTH)
        self.out = nn.Linear(WIDTH, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        where = torch.arange(x.shape[1])
        return self.out(self.tokens(x) + self.positions(where))


def _trained(model: nn.Module, steps: int = 6, *, every: int = 1) -> Monitor:
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    monitor = Monitor(model, optimizer, every=every, also_every=())
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.randint(0, USED, (8, USED // 2), generator=g)  # 5 of 20 positions
        loss = F.cross_entropy(model(x).transpose(1, 2), torch.randint(0, 3, (8, USED // 2)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    return monitor


@pytest.mark.parametrize("every", [1, 2])
def test_rows_of_a_table_the_data_never_used_are_not_weights_without_a_gradient(
    every: int,
) -> None:
    torch.manual_seed(0)
    trace = _trained(Tagger(), every=every).trace()
    # 30 tokens and 15 positions never appear: no gradient, and no dead unit either.
    assert trace.no_grad_weights == {"tokens": 0, "positions": 0, "out": 0}
    assert trace.weight_count["tokens"] == ROWS * WIDTH


def test_a_table_that_never_got_a_gradient_counts_whole() -> None:
    torch.manual_seed(0)
    model = Tagger()
    model.positions.requires_grad_(False)  # frozen: no row gets a gradient
    trace = _trained(model).trace()
    assert trace.no_grad_weights == {"tokens": 0, "positions": 2 * USED * WIDTH, "out": 0}
    assert trace.weight_change["positions"] == 0.0


def test_a_used_rows_weights_without_a_gradient_still_count() -> None:
    torch.manual_seed(0)
    model = Tagger()
    # One coordinate of the output layer's input is cut: the tables' column 0 gets no
    # gradient in any row, used or not; only the used rows' count.
    with torch.no_grad():
        model.out.weight[:, 0] = 0.0
    model.out.weight.register_hook(lambda g: torch.cat([torch.zeros_like(g[:, :1]), g[:, 1:]], 1))
    trace = _trained(model).trace()
    assert trace.no_grad_weights["tokens"] == USED  # column 0 of the 10 used rows
    assert trace.no_grad_weights["positions"] == USED // 2  # of the 5 positions used


def test_a_tied_weight_is_one_parameter() -> None:
    torch.manual_seed(0)
    model = Tagger()
    head = nn.Linear(WIDTH, ROWS, bias=False)
    head.weight = model.tokens.weight  # an output layer tied to the input embedding
    model.add_module("head", head)
    trace = _trained(model).trace()
    assert "head" not in trace.weight_count  # it belongs to the table, counted once
    assert sum(trace.weight_count.values()) == sum(p.numel() for p in model.parameters())


def test_a_resumed_monitor_measures_the_next_update_from_the_reloaded_weights() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = Monitor(model, optimizer, every=1)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))

    def update() -> None:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss)

    def last_layer() -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in model[2].parameters()])

    update()
    checkpoint = copy.deepcopy(model.state_dict())
    update()
    update()
    monitor.close()
    model.load_state_dict(checkpoint)  # the job resumes from its checkpoint after update 1
    before = last_layer()
    monitor.resume(torch.optim.SGD(model.parameters(), lr=0.05))  # a new optimizer
    update()
    trace = monitor.trace()
    expected = float((last_layer() - before).norm() / before.norm())
    assert trace.steps == 4 and trace.lr.tolist() == [0.1, 0.1, 0.1, 0.05]
    assert trace.update_ratio["2"][-1] == pytest.approx(expected, rel=1e-5)
    assert np.isfinite(trace.inactive_share).all()  # the activation hooks came back
