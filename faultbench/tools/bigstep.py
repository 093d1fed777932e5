"""A training step of 5 to 20 ms on one CPU thread, to price the Monitor on a real-sized step.

A small residual network (three basic blocks of 8, 16 and 32 channels, batch
normalization, 16x16 images, batch 32), built here and trained on random
data: nothing is downloaded, and the numbers it learns do not matter, only
how long its steps take with and without a :class:`~faultbench.Monitor`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from faultbench.training.instruments import Instrument
from faultbench.training.monitor import DEFAULT_EVERY, Monitor

WIDTH = 8  # channels of the first block; each later block doubles them
SIDE = 16  # images are SIDE x SIDE, 3 channels
CLASSES = 10
BATCH = 32
DISTINCT_BATCHES = 8  # the random batches the loop cycles through


class Block(nn.Module):
    """A ResNet basic block: two 3x3 convolutions, a 1x1 one on a shortcut that changes shape."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(y + self.shortcut(x))


def small_resnet() -> nn.Sequential:
    """The benchmark's big-step model (about 20 thousand parameters in 29 tensors)."""
    w = WIDTH
    return nn.Sequential(
        nn.Conv2d(3, w, 3, 1, 1, bias=False),
        nn.BatchNorm2d(w),
        nn.ReLU(),
        Block(w, w, 1),
        Block(w, 2 * w, 2),
        Block(2 * w, 4 * w, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * w, CLASSES),
    )


def train_resnet(
    steps: int,
    *,
    monitored: bool,
    seed: int = 0,
    every: int = DEFAULT_EVERY,
    instruments: Sequence[Instrument] = (),
) -> Monitor | None:
    """Train the small ResNet for ``steps`` steps; with a Monitor in the loop's three lines
    (its trace read at the end, as a user would; ``every`` is the Monitor's), or bare;
    ``instruments`` called at the loop's moments as the benchmark's loop calls them."""
    torch.manual_seed(seed)
    model = small_resnet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = [
        (torch.randn(BATCH, 3, SIDE, SIDE), torch.randint(0, CLASSES, (BATCH,)))
        for _ in range(DISTINCT_BATCHES)
    ]
    stream = [batches[i % DISTINCT_BATCHES] for i in range(steps)]
    monitor = Monitor(model, optimizer, every=every) if monitored else None
    for instrument in instruments:
        instrument.start(model, optimizer, F.cross_entropy)
    for step, (xb, yb) in enumerate(monitor.batches(stream) if monitor else stream, start=1):
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        optimizer.zero_grad()
        loss.backward()
        for instrument in instruments:
            instrument.after_backward(model, optimizer, (xb, yb), out, loss, step)
        optimizer.step()
        if monitor is not None:
            monitor.step(loss, out, yb)
        for instrument in instruments:
            instrument.after_step(model, optimizer, (xb, yb), loss, step)
    for instrument in instruments:
        instrument.finish()
    if monitor is not None:
        monitor.close()
        monitor.trace()
    return monitor
