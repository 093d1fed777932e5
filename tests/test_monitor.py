"""The Monitor on any model: every layer's statistics against an independent computation."""

from __future__ import annotations

import copy
import math
import pickle
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from faultbench import FaultbenchError, Monitor
from faultbench.training import activations, hostlog, layers
from faultbench.training.monitor import MonitorWarning
from faultbench.training.trace import Trace

STEPS = 12
BATCH = 8


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One thread, as the benchmark's workers: the test's sums then match torch's own."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- models of every kind, each with (inputs, targets) ----------------------------------
class Scaled(nn.Module):
    """A user-defined layer: a parameter of its own and a child with its own."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(width))
        self.inner = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * self.gain


def cnn() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 5),
    )
    return model, torch.randn(BATCH, 1, 8, 8), torch.randint(0, 5, (BATCH,))


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.rnn = nn.GRU(6, 10, batch_first=True)
        self.head = nn.Linear(10, 11)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(x))
        return self.head(out[:, -1])


def gru() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    return Recurrent(), torch.randint(0, 11, (BATCH, 7)), torch.randint(0, 11, (BATCH,))


class Tagger(nn.Module):
    """Embedding + LayerNorm + Linear, scoring every position; a bias of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(13, 8)
        self.norm = nn.LayerNorm(8)
        self.block = Scaled(8)
        self.act = nn.Tanh()
        self.out = nn.Linear(8, 4)
        self.shift = nn.Parameter(torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.block(self.norm(self.embed(x))))) + self.shift


def tagger() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    return Tagger(), torch.randint(0, 13, (BATCH, 5)), torch.randint(0, 4, (BATCH, 5))


MODELS = {"cnn": cnn, "gru": gru, "embedding-layernorm-linear": tagger}
Builder = Callable[[], tuple[nn.Module, torch.Tensor, torch.Tensor]]


def _own_parameters(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Written out here, apart from the monitor's: each module's parameters of its own."""
    out = {}
    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        if own:
            out[name or "(model)"] = own
    return out


def _norm(tensors: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.double().norm()) ** 2 for t in tensors))


def _train(build: Builder, *, every: int = 1, steps: int = STEPS) -> tuple[Monitor, dict]:
    """Train under a Monitor; alongside, the test's own per-step numbers."""
    torch.manual_seed(0)
    model, x, y = build()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    layers = _own_parameters(model)
    start = {n: [p.detach().clone() for p in ps] for n, ps in layers.items()}
    expected: dict[str, dict[str, list[float]]] = {
        k: {n: [] for n in layers} for k in ("grad", "mean_abs", "ratio")
    }
    expected["acc"] = {"": []}
    monitor = Monitor(model, optimizer, every=every)
    for xb, yb in monitor.batches([(x, y)] * steps):
        before = {n: [p.detach().clone() for p in ps] for n, ps in layers.items()}
        out = model(xb)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), yb.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss, out, yb)
        expected["acc"][""].append(float((out.argmax(-1) == y).double().mean()))
        for n, ps in layers.items():
            grads = [p.grad for p in ps if p.grad is not None]
            expected["grad"][n].append(_norm(grads))
            expected["mean_abs"][n].append(
                sum(float(g.abs().double().sum()) for g in grads) / sum(p.numel() for p in ps)
            )
            moved = _norm([p.detach() - b for p, b in zip(ps, before[n])])
            size = _norm(before[n])
            expected["ratio"][n].append(moved / size if size > 0 else 0.0)  # as documented
    expected["change"] = {}
    for n, ps in layers.items():
        moved, size = _norm([p.detach() - s for p, s in zip(ps, start[n])]), _norm(start[n])
        expected["change"][n] = moved / size if size > 0 else float(moved > 0)
    monitor.close()
    return monitor, expected


@pytest.fixture(params=["one block", "small blocks"])
def blocks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Steps reduced all together, or in blocks of 5 (read in blocks of 4) that the run crosses."""
    if request.param == "small blocks":
        monkeypatch.setattr(layers, "BLOCK_ROWS", 5)
        monkeypatch.setattr(hostlog, "BLOCK_STEPS", 4)
        monkeypatch.setattr(activations, "BLOCK_STEPS", 4)
    return str(request.param)


@pytest.mark.parametrize("kind", MODELS)
def test_every_layer_is_recorded_under_its_module_path(kind: str, blocks: str) -> None:
    monitor, expected = _train(MODELS[kind])
    t = monitor.trace()
    names = list(expected["grad"])
    assert list(t.grad_norm) == names == monitor.layers
    assert t.steps == STEPS and len(t.stat_steps) == STEPS
    for name in names:
        np.testing.assert_allclose(t.grad_norm[name], expected["grad"][name], rtol=1e-5)
        np.testing.assert_allclose(t.grad_mean_abs[name], expected["mean_abs"][name], rtol=1e-5)
        np.testing.assert_allclose(t.update_ratio[name], expected["ratio"][name], rtol=1e-4)
        assert t.weight_change[name] == pytest.approx(expected["change"][name], rel=1e-4)
    np.testing.assert_allclose(t.batch_acc, expected["acc"][""])


def test_a_container_and_its_children_are_counted_once() -> None:
    monitor, _ = _train(tagger)
    t = monitor.trace()
    assert t.weight_count == {
        "embed": 13 * 8,
        "norm": 2 * 8,
        "block": 8,  # Scaled.gain alone: its child is a layer of its own
        "block.inner": 8 * 8 + 8,
        "out": 8 * 4 + 4,
        "(model)": 4,  # the model's own parameter
    }
    assert sum(t.weight_count.values()) == sum(p.numel() for p in monitor.model.parameters())


def test_a_shared_parameter_belongs_to_its_first_module() -> None:
    first = nn.Linear(4, 4)
    second = nn.Linear(4, 4)
    second.weight = first.weight  # tied
    model = nn.Sequential(first, nn.ReLU(), second)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    assert monitor.trace().weight_count == {"0": 20, "2": 4}


@pytest.mark.parametrize(
    ("kind", "classes", "widths"),
    [("cnn", 5, (1, 4, 5)), ("gru", 11, (6, 10, 11)), ("embedding-layernorm-linear", 4, (8, 8, 4))],
)
def test_classes_and_widths_come_from_what_the_model_outputs(
    kind: str, classes: int, widths: tuple[int, ...]
) -> None:
    # The convolution's width is its channels; the embedding and the layer
    # norm set none (a lookup and a per-feature scale); the tagger's classes
    # are the last dimension of a (batch, positions, classes) output.
    monitor, _ = _train(MODELS[kind], steps=2)
    config = monitor.config()
    assert config.n_classes == classes
    assert config.layer_widths == widths
    assert config.batch_size == BATCH and config.steps == 2


def test_classes_do_not_come_from_the_last_linear_layer() -> None:
    # Two heads of 3 classes each out of one Linear layer of 6 outputs.
    model = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 6), nn.Unflatten(1, (2, 3)))
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    assert model(torch.randn(4, 2)).shape == (4, 2, 3)
    assert monitor.config().n_classes == 3
    assert monitor.config().layer_widths == (2, 8, 6)


def test_a_one_channel_bottleneck_shows_in_the_widths() -> None:
    model = nn.Sequential(nn.Conv2d(3, 1, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(16, 10))
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    model(torch.randn(2, 3, 4, 4))
    assert monitor.config().layer_widths == (3, 1, 10)


def test_activation_modules_are_measured_on_their_outputs(blocks: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(6, 16),
        nn.ReLU(),
        nn.Linear(16, 16),
        nn.LeakyReLU(0.1),
        nn.Linear(16, 16),
        nn.Sigmoid(),
        nn.Linear(16, 16),
        nn.Tanh(),
        nn.Linear(16, 3),
    )
    with torch.no_grad():
        model[4].weight.mul_(30.0)  # drive the Sigmoid into saturation
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    monitor = Monitor(model, optimizer, every=1)
    x, y = torch.randn(32, 6) - 0.5, torch.randint(0, 3, (32,))
    want: dict[str, list[float]] = {k: [] for k in ("1", "3", "5", "7", "abs1", "abs5", "dead")}
    for _ in range(7):
        model.eval()  # the same outputs (no dropout, no batch norm), unseen by the monitor
        with torch.no_grad():  # each activation's output, by running the model up to it
            outs = {i: model[: i + 1](x) for i in (1, 3, 5, 7)}
        model.train()
        want["1"].append(float((outs[1] <= 0).double().mean()))
        want["3"].append(float((outs[3] <= 0).double().mean()))
        want["5"].append(
            float(
                ((outs[5] < 1 / (1 + math.e**5)) | (outs[5] > 1 / (1 + math.e**-5))).double().mean()
            )
        )
        want["7"].append(float((outs[7].abs() > math.tanh(5)).double().mean()))
        want["abs1"].append(float(outs[1].abs().double().mean()))
        want["abs5"].append(float(outs[5].abs().double().mean()))
        dead = [float((o <= 0).all(dim=0).double().mean()) for o in (outs[1], outs[3])]
        want["dead"].append(sum(dead) / 2)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    t = monitor.trace()
    assert set(t.nonpositive_share) == {"1", "3"} and set(t.saturated_share) == {"5", "7"}
    np.testing.assert_allclose(t.nonpositive_share["1"], want["1"])
    np.testing.assert_allclose(t.nonpositive_share["3"], want["3"])
    np.testing.assert_allclose(t.saturated_share["5"], want["5"])
    np.testing.assert_allclose(t.saturated_share["7"], want["7"])
    assert 0 < np.mean(want["5"]) < 1  # so the saturation count is put to the test
    np.testing.assert_allclose(t.activation_mean_abs["1"], want["abs1"], rtol=1e-5)
    np.testing.assert_allclose(t.activation_mean_abs["5"], want["abs5"], rtol=1e-5)
    np.testing.assert_allclose(t.inactive_share, want["dead"])
    assert set(t.activation_mean_abs) == {"1", "3", "5", "7"}


UNIT_LAYOUTS = {
    # name: (layer before the ReLU, input shape, the output's unit dimension)
    "linear (N, C)": (lambda: nn.Linear(3, 6), (BATCH, 3), 1),
    "sequence (N, T, C)": (lambda: nn.Linear(3, 6), (BATCH, 5, 3), 2),
    "conv2d (N, C, H, W)": (lambda: nn.Conv2d(2, 6, 3), (BATCH, 2, 6, 6), 1),
    "conv3d (N, C, D, H, W)": (lambda: nn.Conv3d(2, 6, 3), (BATCH, 2, 4, 4, 4), 1),
}


@pytest.mark.parametrize("layout", UNIT_LAYOUTS)
def test_inactive_units_are_channels_of_a_convolution_and_features_otherwise(layout: str) -> None:
    build, shape, unit_dim = UNIT_LAYOUTS[layout]
    torch.manual_seed(0)
    model = nn.Sequential(build(), nn.ReLU())
    with torch.no_grad():
        model[0].bias[:2] = -100.0  # two units dead everywhere
        model[0].bias[2] = -1.5  # one alive in part of the batch or positions
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=1e-3), every=1)
    want_inactive, want_nonpositive = [], []
    for _ in range(3):
        x = torch.randn(shape)
        out = model(x)
        # Written out here: move the unit dimension last, then ask of each unit whether
        # any of its outputs (any example, position or pixel) was > 0.
        per_unit = np.moveaxis(out.detach().numpy(), unit_dim, -1).reshape(-1, 6)
        want_inactive.append(float(np.mean(~(per_unit > 0).any(axis=0))))
        want_nonpositive.append(float(np.mean(per_unit <= 0)))
        out.mean().backward()
        monitor.step(out.mean())
    t = monitor.trace()
    np.testing.assert_allclose(t.inactive_share, want_inactive)
    np.testing.assert_allclose(t.nonpositive_share["1"], want_nonpositive, rtol=1e-6)
    assert min(want_inactive) >= 2 / 6 and max(want_inactive) < 1  # so a wrong axis shows


def test_a_functional_activation_is_not_seen() -> None:
    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.relu(self.fc(x))

    model = Functional()
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    model(torch.randn(4, 3)).sum().backward()
    monitor.step(0.0)
    t = monitor.trace()
    assert t.nonpositive_share == {} and t.inactive_share.tolist() == [0.0]


def test_reading_the_trace_mid_run_changes_no_later_number() -> None:
    every, steps = 3, 10
    _, want = _train(MODELS["cnn"], steps=steps)  # the test's own numbers, every step
    torch.manual_seed(0)
    model, x, y = cnn()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = Monitor(model, optimizer, every=every)
    for step in range(steps):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss)
        if step == 2 * every - 1:  # the next step is recorded: its weights before are kept
            monitor.trace()
    recorded = list(range(0, steps, every))
    for name, values in monitor.trace().update_ratio.items():
        np.testing.assert_allclose(values, np.array(want["ratio"][name])[recorded], rtol=1e-5)


@pytest.mark.parametrize("every", [2, 5])
def test_every_k_records_the_same_numbers_on_fewer_steps(every: int, blocks: str) -> None:
    steps = 11
    full, _ = _train(MODELS["cnn"], steps=steps)
    sparse, _ = _train(MODELS["cnn"], steps=steps, every=every)
    a, b = full.trace(), sparse.trace()
    recorded = list(range(0, steps, every))  # steps 1, 1 + k, ... (0-based here)
    assert b.stat_steps.tolist() == recorded and b.steps == steps
    np.testing.assert_array_equal(b.loss, a.loss)
    for field in ("grad_norm", "update_ratio", "grad_mean_abs", "weight_norm"):
        for name, values in getattr(b, field).items():
            np.testing.assert_allclose(values, getattr(a, field)[name][recorded], rtol=1e-6)
    for field in ("zero_grad_share", "inactive_share"):
        np.testing.assert_allclose(getattr(b, field), getattr(a, field)[recorded])
    np.testing.assert_allclose(b.nonpositive_share["2"], a.nonpositive_share["2"][recorded])


def test_by_default_the_statistics_are_recorded_every_twentieth_step() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = Monitor(model, optimizer)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    for _ in range(45):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    t = monitor.trace()
    assert t.stat_steps.tolist() == [0, 20, 40] and t.steps == 45 and len(t.loss) == 45
    assert all(len(v) == 3 for v in t.grad_norm.values()) and len(t.inactive_share) == 3


@pytest.mark.parametrize("every", [0, -1, 1.5, True])
def test_every_must_be_a_whole_number_of_steps(every: object) -> None:
    model = nn.Linear(2, 2)
    with pytest.raises(FaultbenchError, match=re.escape(f"every={every!r}: expected a whole")):
        Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=every)  # type: ignore[arg-type]


def test_never_got_a_gradient_counts_weights_whose_gradient_was_always_zero() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 3), nn.Tanh(), nn.Linear(3, 2))
    frozen = nn.Linear(2, 2).requires_grad_(False)  # never gets a gradient at all
    model.add_module("unused", frozen)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = Monitor(model, optimizer, every=1)
    x = torch.randn(16, 5)
    x[:, 1] = 0.0  # a dead input: its weights never get a gradient
    for _ in range(4):
        loss = F.cross_entropy(model[:3](x), torch.randint(0, 2, (16,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    t = monitor.trace()
    assert t.no_grad_weights == {"0": 3, "2": 0, "unused": 6}
    total = sum(t.weight_count.values())
    np.testing.assert_allclose(t.zero_grad_share, [(3 + 6) / total] * 4)
    assert t.weight_change["unused"] == 0.0


def test_step_keeps_the_training_accuracy_with_soft_targets_too() -> None:
    model = nn.Linear(3, 4)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    out = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])
    monitor.step(0.5, out, F.one_hot(torch.tensor([0, 2]), 4).float())
    monitor.step(0.5)  # no output: no accuracy for this step
    assert monitor.trace().batch_acc.tolist()[0] == 0.5
    assert np.isnan(monitor.trace().batch_acc[1])


def test_step_records_no_score_for_targets_it_cannot_read_and_says_so_once() -> None:
    model = nn.Linear(3, 4)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    with pytest.warns(MonitorWarning, match=re.escape("output (5, 4) and target (5, 2)")):
        monitor.step(0.0, torch.zeros(5, 4), torch.zeros(5, 2, dtype=torch.long))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same reason is not said twice
        monitor.step(0.0, torch.zeros(5, 4), torch.zeros(5, 2, dtype=torch.long))
    assert np.isnan(monitor.trace().batch_acc).all()
    assert len(monitor.notes) == 1
    with pytest.raises(FaultbenchError, match="expected both as tensors"):
        monitor.step(0.0, torch.zeros(5, 4))


def test_a_loss_must_have_one_element() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    out = model(torch.randn(5, 4))
    monitor.step(out.sum().reshape(1))  # one element, any shape: fine
    with pytest.raises(RuntimeError):
        monitor.step(out.sum(dim=1))


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def test_activation_hooks_are_on_the_model_only_for_the_steps_recorded() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.Sigmoid())
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=3)
    model(torch.randn(2, 4))  # the first forward: widths and classes are read from it
    on = []
    for _ in range(7):
        on.append(len(model[1]._forward_hooks) + len(model[3]._forward_hooks))
        model(torch.randn(2, 4)).sum().backward()
        monitor.step(0.0)
    assert on == [2, 0, 0, 2, 0, 0, 2]  # steps 0, 3, 6 are recorded
    monitor.close()
    monitor.step(0.0)
    monitor.step(0.0)  # the next one would be recorded: a closed monitor puts no hook back
    assert _hooks(model) == 0


def test_closing_the_monitor_removes_every_hook() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.Sigmoid())
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    assert _hooks(model) > 0
    monitor.close()
    assert _hooks(model) == 0
    model(torch.randn(2, 4))
    assert monitor.trace().steps == 0


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))])
def test_a_copy_of_a_monitored_model_is_not_monitored(clone) -> None:  # type: ignore[no-untyped-def]
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    other = clone(model)
    x = torch.randn(5, 4)
    torch.testing.assert_close(other(x), model(x))
    monitor.step(0.0)
    other(x)  # a forward of the copy after the step: not the monitor's
    monitor.step(0.0)
    t = monitor.trace()
    assert np.isnan(t.nonpositive_share["1"][1])  # the second step saw no forward of its own


def test_the_monitor_leaves_the_parameters_where_they_are() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    where = [p.data_ptr() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = Monitor(model, optimizer, every=1)
    for _ in range(3):
        loss = model(torch.randn(5, 4)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss)
    assert [p.data_ptr() for p in model.parameters()] == where
    assert all("forward" not in m.__dict__ for m in model.modules())  # no patched forward


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_dtypes_are_recorded(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).to(dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = Monitor(model, optimizer, every=1)
    x, y = torch.randn(16, 4, dtype=dtype), torch.randint(0, 3, (16,))
    expected = []
    for _ in range(6):
        optimizer.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        optimizer.step()
        monitor.step(loss, out, y)
        expected.append(_norm([p.grad for p in model[0].parameters()]))
    t = monitor.trace()
    np.testing.assert_allclose(t.grad_norm["0"], expected, rtol=1e-5)
    assert np.isfinite(t.update_ratio["2"]).all() and np.isfinite(t.batch_acc).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("activation", [nn.ReLU, nn.LeakyReLU, nn.ELU, nn.Sigmoid, nn.Tanh])
def test_every_activation_is_measured_in_every_float_dtype(
    activation: type[nn.Module], dtype: torch.dtype
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), activation(), nn.Linear(8, 3)).to(dtype)
    with torch.no_grad():
        model[0].weight.mul_(4.0)  # some outputs saturated, some not
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=1e-3), every=1)
    flagged, mean_abs = [], []
    for _ in range(3):
        x = torch.randn(32, 4, dtype=dtype)
        hidden = model[:2](x).detach().float()  # the activation's output, widened here
        if activation in (nn.Sigmoid, nn.Tanh):
            centre = 0.5 if activation is nn.Sigmoid else 0.0
            edge = abs((torch.sigmoid if centre else torch.tanh)(torch.tensor(5.0)) - centre)
            flagged.append(float(((hidden - centre).abs() > edge).double().mean()))
        else:
            flagged.append(float((hidden <= 0).double().mean()))
        mean_abs.append(float(hidden.abs().double().mean()))
        model(x).float().sum().backward()
        monitor.step(0.0)
    t = monitor.trace()
    shares = t.saturated_share if activation in (nn.Sigmoid, nn.Tanh) else t.nonpositive_share
    np.testing.assert_allclose(shares["1"], flagged, atol=1e-6)
    np.testing.assert_allclose(t.activation_mean_abs["1"], mean_abs, rtol=1e-3)
    assert 0 < np.mean(flagged) < 1  # so the count is put to the test


def test_activations_recorded_under_inference_mode_leave_training_possible() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(), nn.Linear(8, 3))
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1)
    with torch.inference_mode():  # in training mode: a forward the monitor counts
        model(torch.randn(2, 4))
    model(torch.randn(2, 4)).sum().backward()  # writes the same scratch outside it
    monitor.step(0.0)
    assert len(monitor.trace().nonpositive_share["1"]) == 1


def test_an_output_without_units_is_measured_beside_others() -> None:
    model = nn.ReLU()
    whole = nn.Sequential(model, nn.Linear(1, 1))
    monitor = Monitor(whole, torch.optim.SGD(whole.parameters(), lr=0.1))
    model(torch.randn(4, 0))  # a batch of zero-width rows, then ordinary outputs
    model(torch.randn(3))
    model(torch.randn(2, 5))
    monitor.step(0.0)
    t = monitor.trace()
    assert t.nonpositive_share["0"].shape == (1,) and np.isfinite(t.inactive_share).all()


def test_a_trace_with_every_field_survives_its_dict_form() -> None:
    monitor, _ = _train(tagger, steps=3)
    t = monitor.trace()
    back = Trace.from_dict(t.to_dict())
    for name in t.__dataclass_fields__:
        a, b = getattr(t, name), getattr(back, name)
        if isinstance(a, dict):
            assert a.keys() == b.keys(), name
            for k in a:
                np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name}[{k}]")
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_the_package_holds_no_native_code_and_no_private_torch_calls() -> None:
    root = Path(__file__).resolve().parents[1]
    sources = sorted((root / "faultbench").rglob("*.py"))
    assert sources
    pattern = re.compile(r"_C\.|_cdata|ctypes")
    found = [
        f"{p}:{n}"
        for p in sources
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
    native = [p for ext in ("*.c", "*.pyi") for p in (root / "faultbench").rglob(ext)]
    assert native == [] and not (root / "setup.py").exists()
    assert "ext_modules" not in (root / "pyproject.toml").read_text()


# -- any device: nothing in the loop waits for it -------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("every", [1, 3])
def test_a_monitored_cuda_loop_never_waits_for_the_device(every: int) -> None:
    torch.manual_seed(0)
    device = torch.device("cuda")
    model, x, y = cnn()
    model, x, y = model.to(device), x.to(device), y.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = [(x, y)] * 70  # more than one block of steps
    norms = []
    monitor = Monitor(model, optimizer, every=every)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for xb, yb in monitor.batches(batches):
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(loss, out, yb)
            norms.append(torch.stack([p.grad.norm() for p in model[0].parameters()]))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    t = monitor.trace()
    expected = torch.stack(norms).double().norm(dim=1).cpu().numpy()
    assert t.steps == 70 and np.isfinite(t.loss).all()
    np.testing.assert_allclose(t.grad_norm["0"], expected[::every], rtol=1e-4)
    assert np.isfinite(t.batch_acc).all() and set(t.nonpositive_share) == {"2"}
