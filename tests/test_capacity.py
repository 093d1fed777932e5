"""Capacity judged by what a layer can carry: a convolution by its channels over the positions
it passes on, a sigmoid or softmax output by what it is, and a widening the probe can try on
a CNN and on every model of the registry's layers but a transformer's.

The loops are a user's, on scikit-learn's bundled digits as 8x8 images (nothing downloaded),
watched by a Monitor and diagnosed through the public API."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

from faultbench import Monitor, Probe
from faultbench.diagnosers import _features, _treatment, rules
from faultbench.faults.architectures import build
from faultbench.scoring.diagnosis import Diagnosis
from faultbench.tasks.design import Network
from faultbench.tools.doctor import diagnose_monitor, run_of

STEPS = 300  # enough for a working model of the digits to fit them well
TRAIN = 1400  # examples trained on; the rest validate
CLASSES = 10
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: more threads only wait for each other
    yield
    torch.set_num_threads(before)


def _images() -> tuple[torch.Tensor, torch.Tensor]:
    X, y = load_digits(return_X_y=True)
    X = (X - X.mean()) / X.std()
    return torch.tensor(X, dtype=torch.float32).reshape(-1, 1, 8, 8), torch.tensor(y)


def _cnn(channels: int, *, bottleneck: int = 0) -> Callable[[], nn.Module]:
    """A user's CNN: one 3x3 convolution of ``channels``, pooled to 4x4, then (with a
    ``bottleneck``) a dense layer of that width, then the classes."""

    def make() -> nn.Module:
        torch.manual_seed(0)
        head: list[nn.Module] = [nn.Linear(channels * 16, CLASSES)]
        if bottleneck:
            head = [nn.Linear(channels * 16, bottleneck), nn.ReLU(), nn.Linear(bottleneck, CLASSES)]
        conv = [nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()]
        return nn.Sequential(*conv, *head)

    return make


def _sigmoid_mlp(outputs: int) -> Callable[[], nn.Module]:
    """An MLP whose output ends in a sigmoid (handed to a loss that takes logits)."""

    def make() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, outputs), nn.Sigmoid()
        )

    return make


def _train(make: Callable[[], nn.Module], y: torch.Tensor, loss_fn: Loss, kind: str) -> Monitor:
    """A user's loop: Adam, batches of 32, the training and validation score every 50 steps."""
    X, _ = _images()
    model = make()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    monitor = Monitor(model, optimizer, kind=kind)
    draw = torch.Generator().manual_seed(0)
    for step in range(1, STEPS + 1):
        index = torch.randint(0, TRAIN, (32,), generator=draw)
        optimizer.zero_grad()
        out = model(X[index])
        loss = loss_fn(out, y[index])
        loss.backward()
        optimizer.step()
        monitor.step(loss, out, y[index])
        if step % 50 == 0:
            train_acc, val_acc = _scores(model, X, y, kind)
            monitor.log_eval(train_acc=train_acc, val_acc=val_acc)
    monitor.close()
    return monitor


@torch.no_grad()
def _scores(model: nn.Module, X: torch.Tensor, y: torch.Tensor, kind: str) -> tuple[float, float]:
    """The training and validation accuracy (of every label, for labels)."""
    model.eval()
    out = model(X)
    right = out.argmax(1) == y if kind == "multiclass" else (out > 0.5).float() == y
    model.train()
    return float(right[:TRAIN].float().mean()), float(right[TRAIN:].float().mean())


def _diagnosed(make: Callable[[], nn.Module], y: torch.Tensor, loss_fn: Loss, kind: str):
    """(the monitor, rules' answer without a probe, rules' answer with one)."""
    monitor = _train(make, y, loss_fn, kind)
    X, _ = _images()
    probe = Probe.from_user(make, loss_fn, X[:TRAIN], y[:TRAIN])
    return monitor, _answer(monitor), _answer(monitor, probe)


def _answer(monitor: Monitor, probe: Probe | None = None) -> Diagnosis:
    return diagnose_monitor(monitor, "rules", probe=probe)


# -- a convolution is read by its channels over the positions it passes on ----------------


def test_a_healthy_cnn_with_fewer_channels_than_classes_is_not_too_small() -> None:
    _, y = _images()
    monitor, alone, probed = _diagnosed(_cnn(4), y, F.cross_entropy, "multiclass")
    run = run_of(monitor)
    assert run.config.layer_widths == (1, 4, CLASSES)  # four channels, ten classes
    assert _features.carried_widths(run) == (4 * 16,)  # over the 4x4 positions pooled
    assert _features.feature_maps(run) == (4,)
    assert not rules.judge(rules.NARROW, run).fired
    assert alone.label == probed.label == "healthy", (alone.evidence, probed.evidence)
    said = alone.evidence["narrow_layer"]["treatment"]["said"]
    assert said == "no probe: a suspicion only, not raised"
    tried = probed.evidence["narrow_layer"]["treatment"]  # the widening was tried on the CNN
    assert tried["fix"].startswith("every hidden layer") and not tried["helped"]
    assert tried["probe_steps"] > 0


def test_a_dense_bottleneck_after_a_convolution_is_still_too_small() -> None:
    _, y = _images()
    monitor, alone, probed = _diagnosed(_cnn(8, bottleneck=2), y, F.cross_entropy, "multiclass")
    run = run_of(monitor)
    assert _features.carried_widths(run) == (8 * 16, 2)  # the map carries; the dense 2 does not
    assert alone.label == probed.label == "too_small_model", (alone.evidence, probed.evidence)
    assert probed.evidence["narrow_layer"]["treatment"]["helped"]


@pytest.mark.parametrize("norm", ["none", "batch", "layer"])
def test_what_each_layer_of_a_registry_cnn_passes_on(norm: str) -> None:
    # 12x12 images, two pooled 3x3 convolutions of 4 and 1 channels (3x3 positions left),
    # then dense layers of 32, 2 and 32: each layer's normalization is no layer of its own.
    net = Network("cnn", widths=(32, 2, 32), channels=(4, 1), norm=norm)
    model = build(net, n_features=144, n_outputs=5, image_side=12)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    monitor = Monitor(model, optimizer, kind="multiclass")
    loss = F.cross_entropy(model(torch.randn(8, 144)), torch.arange(8) % 5)
    monitor.step(loss)  # as the benchmark's loop does: the widths come from the forward
    run = run_of(monitor)
    assert run.config.layer_widths == (1, 4, 1, 32, 2, 32, 5)
    # 4 channels read by a 3x3 kernel; 1 channel read flattened over 9 positions
    assert _features.carried_widths(run) == (4 * 9, 1 * 9, 32, 2, 32)
    assert _features.feature_maps(run) == (4, 1)
    assert rules.narrowness(run) == 5 - 2  # the dense bottleneck, not the one channel


# -- a sigmoid output is read by what it is, not by its width -----------------------------


@pytest.mark.parametrize("kind", ["binary", "multilabel"])
def test_a_sigmoid_before_a_logits_loss_is_not_a_model_too_small(kind: str) -> None:
    _, digits = _images()
    if kind == "binary":
        y = (digits >= 5).float()[:, None]
    else:
        y = torch.stack([digits % k == 0 for k in (2, 3, 4, 5)], 1).float()
    make = _sigmoid_mlp(y.shape[1])
    monitor, alone, probed = _diagnosed(make, y, F.binary_cross_entropy_with_logits, kind)
    assert math_nan(rules.narrowness(run_of(monitor)))  # labels: no class count to fall below
    assert alone.label != "too_small_model"
    assert probed.label == "softmax_before_loss", probed.evidence
    assert probed.evidence["memorization"]["hands_probabilities"]


def math_nan(value: float) -> bool:
    return value != value


# -- the probe widens a CNN's channels, and any model of the registry's layers ---------------


def _channels(model: nn.Module) -> list[int]:
    return [m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d)]


def test_the_widening_grows_a_cnns_channels_and_what_reads_them() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1),
        nn.BatchNorm2d(2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(2, 3, 3, padding=1),
        nn.GroupNorm(1, 3),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(3 * 16, 4),
        nn.LayerNorm(4),
        nn.ReLU(),
        nn.Linear(4, CLASSES),
    )
    widened = _treatment._widened(model, 20)
    assert widened is model
    assert _channels(widened) == [20, 20]
    linear = [m for m in widened.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(20 * 16, 20), (20, CLASSES)]
    norms = [m for m in widened.modules() if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm))]
    assert [getattr(m, "num_features", getattr(m, "num_channels", 0)) for m in norms] == [20, 20]
    assert widened(torch.randn(5, 1, 8, 8)).shape == (5, CLASSES)


@pytest.mark.parametrize(
    ("architecture", "inputs"),
    [
        ("mlp", lambda: torch.randn(4, 12)),
        ("cnn", lambda: torch.randn(4, 144)),
        ("gru", lambda: torch.randint(0, 5, (4, 12)).float()),
        ("tabular", lambda: (torch.randint(0, 3, (4, 2)), torch.randn(4, 12))),
    ],
)
@pytest.mark.parametrize("norm", ["none", "batch", "layer"])
def test_the_widening_rebuilds_every_registry_model_but_a_transformer(
    architecture: str, inputs: Callable[[], object], norm: str
) -> None:
    net = Network(architecture, widths=(32, 2, 32), channels=(4, 1), norm=norm)
    model = build(net, n_features=12, n_outputs=5, image_side=12, code_sizes=(3, 4))
    widened = _treatment._widened(model, 10)
    assert widened is not None
    linear = [m.out_features for m in widened.modules() if isinstance(m, nn.Linear)]
    assert linear == [32, 10, 32, 5]  # the bottleneck widened; the output's classes kept
    if architecture == "cnn":
        assert _channels(widened) == [10, 10]
    x = inputs()
    assert widened(*x if isinstance(x, tuple) else (x,)).shape == (4, 5)


def test_a_transformer_is_not_widened() -> None:
    net = Network("transformer", widths=(8, 8), heads=2)
    model = build(net, n_features=12, n_outputs=30, image_side=0)
    assert _treatment._widened(model, 60) is None


def test_a_model_that_memorized_leaves_the_widening_nothing_to_show() -> None:
    # The probe stops where the loss crosses MEMORIZED: a lower ratio is one step's overshoot.
    memorized = _treatment.MEMORIZED
    assert not _treatment._memo_helps(0.9 * memorized, 0.3 * memorized)
    assert _treatment._memo_helps(6 * memorized, 0.8 * memorized)  # memorizes once widened
    assert _treatment._memo_helps(6 * memorized, 2 * memorized)  # much closer
    assert not _treatment._memo_helps(6 * memorized, 4 * memorized)
