"""The monitor's fast paths record what its plain path records."""

from __future__ import annotations

import copy
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.faults.fault import base_setup, condition
from faultbench.faults.recipe import BatchStream
from faultbench.tasks.task import get_task
from faultbench.training import monitor as monitor_module
from faultbench.training.model import build_model
from faultbench.training.monitor import _ChunkedStats, _KernelStats, pack_layers
from faultbench.training.trace import Trace

STEPS = 70  # more than two chunks of 32, and a partial one
TIMED = {"wait_seconds", "compute_seconds"}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Train on one thread, as the benchmark's workers do: on more, torch may
    split a reduction differently from one run to the next, and two runs of
    the same training differ in the last bit now and then."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _trace(task: str, fault: str, *, pack: bool, set_to_none: bool = False) -> Trace:
    return _run(task, fault, pack=pack, set_to_none=set_to_none).trace()


def _run(
    task: str,
    fault: str,
    *,
    pack: bool,
    set_to_none: bool = False,
    disturb: Callable[[int, nn.Module], None] | None = None,
) -> Monitor:
    """A short run of the benchmark's model, recorded by a Monitor in a loop of
    our own; ``disturb(step, model)`` runs after each update, before the monitor."""
    setup = base_setup(get_task(task), 0)
    if fault:
        setup = condition(fault).apply(setup)
    model = build_model(setup)
    if pack:
        pack_layers(model)
    optimizer = setup.make_optimizer(setup.param_groups(model, setup), setup)
    monitor = Monitor(model, optimizer)
    stream = BatchStream(setup.X_train, setup.y_train, batch_size=setup.batch_size, seed=0)
    for step, (xb, yb) in zip(range(STEPS), monitor.batches(stream)):
        loss = F.cross_entropy(model(xb), yb)
        if fault != "missing_zero_grad":
            model.zero_grad(set_to_none=set_to_none)
        loss.backward()
        optimizer.step()
        if disturb is not None:
            disturb(step, model)
        monitor.step(loss)
    monitor.close()
    return monitor


def _assert_same(a: Trace, b: Trace) -> None:
    for name in a.__dataclass_fields__:
        if name in TIMED:
            continue
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, dict):
            assert x.keys() == y.keys(), name
            for key in x:
                np.testing.assert_array_equal(x[key], y[key], err_msg=f"{name}[{key}]")
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("task", ["digits", "shapes", "language"])  # mlp, cnn, gru
@pytest.mark.parametrize("fault", ["", "missing_zero_grad", "frozen_layer", "dead_units"])
def test_packed_layers_record_the_same_trace(task: str, fault: str) -> None:
    plain = _trace(task, fault, pack=False)
    _assert_same(_trace(task, fault, pack=True), plain)
    # Gradients set to None move out of the pack: the monitor must notice and
    # copy tensor by tensor, still recording the same numbers.
    _assert_same(_trace(task, fault, pack=True, set_to_none=True), plain)


def _move_a_weight(step: int, model: nn.Module) -> None:
    if step == 40:  # a loop that reassigns a weight, e.g. to clip or mask it
        weight = next(model.parameters())
        weight.data = weight.data.clone()


def _replace_a_gradient(step: int, model: nn.Module) -> None:
    if step == 40:  # e.g. gradient surgery that assigns a new tensor
        bias = list(model.parameters())[-1]
        bias.grad = None if bias.grad is None else bias.grad.clone()


def _replace_every_gradient(step: int, model: nn.Module) -> None:
    if step == 40:  # as a backward after zero_grad(set_to_none=True) does
        for p in model.parameters():
            p.grad = None if p.grad is None else p.grad.clone()


@pytest.mark.parametrize("disturb", [_move_a_weight, _replace_a_gradient, _replace_every_gradient])
def test_a_tensor_moved_out_of_the_pack_mid_run_is_followed(
    disturb: Callable[[int, nn.Module], None],
) -> None:
    # The monitor trusts the pack on a cheap check; a move it misses would read
    # the pack's stale copy from then on (updates of 0, old gradients).
    plain = _trace("digits", "", pack=False)
    packed = _run("digits", "", pack=True, disturb=disturb)
    _assert_same(packed.trace(), plain)


@pytest.mark.parametrize("task", ["digits", "shapes", "language"])
def test_packed_layers_are_copied_in_one_piece(task: str) -> None:
    assert _run(task, "", pack=True)._work._packed is not None
    assert _run(task, "", pack=False)._work._packed is None  # so the test above compares two paths


def test_a_packed_trace_measures_what_it_claims() -> None:
    t = _trace("digits", "", pack=True)
    assert len(t.loss) == STEPS and np.isfinite(t.loss).all()
    for name in ("hidden", "output"):
        assert (t.grad_norm[name] > 0).all()
        assert (t.update_ratio[name] > 0).all() and (t.update_ratio[name] < 1).all()
    frozen = _trace("digits", "frozen_layer", pack=True)
    assert (frozen.update_ratio["hidden"] == 0).all() and frozen.weight_change["hidden"] == 0
    assert (frozen.update_ratio["output"] > 0).all()
    dead = _trace("digits", "dead_units", pack=True)
    assert dead.inactive_share.mean() > 0.5 > t.inactive_share.mean()


def _small() -> tuple[nn.Sequential, Monitor]:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    return model, Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_closing_the_monitor_gives_the_model_back_untouched() -> None:
    model, monitor = _small()
    relu = model[1]
    assert "forward" in relu.__dict__  # watched while open
    monitor.close()
    assert "forward" not in relu.__dict__
    model(torch.randn(5, 4))
    assert monitor._acts == []


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))])
def test_a_copy_of_a_monitored_model_is_not_monitored(clone) -> None:  # type: ignore[no-untyped-def]
    model, monitor = _small()
    other = clone(model)
    x = torch.randn(5, 4)
    torch.testing.assert_close(other(x), model(x))
    assert len(monitor._acts) == 1  # the original's forward only
    assert other[1].forward.__self__ is other[1]


class _Doubling(nn.ReLU):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return super().forward(input) * 2


@pytest.mark.parametrize(
    "relu", [nn.ReLU(), nn.ReLU(inplace=True), _Doubling()], ids=["plain", "inplace", "subclass"]
)
def test_a_watched_relu_computes_what_it_computed(relu: nn.ReLU) -> None:
    # A plain ReLU's tap calls torch.relu itself; the others go through their forward.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), relu, nn.Linear(8, 3))
    x = torch.randn(16, 4)
    before = model(x.clone())
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert isinstance(relu.forward, monitor_module._ReluTap) == (type(relu) is nn.ReLU)
    torch.testing.assert_close(model(x.clone()), before, rtol=0, atol=0)
    hidden = relu(model[0](x))  # watched as well: counted
    expected = float((hidden <= 0).all(dim=0).float().mean())
    assert monitor._acts[-1] == pytest.approx(expected)
    monitor.close()


def test_a_loss_must_have_one_element() -> None:
    model, monitor = _small()
    out = model(torch.randn(5, 4))
    monitor.step(out.sum().reshape(1))  # one element, any shape: fine
    with pytest.raises(RuntimeError):
        monitor.step(out.sum(dim=1))


# -- the compiled kernel against the numpy path ---------------------------------
NORMS = {"grad_norm", "update_ratio"}  # summed in another order: last-bit differences


def _without_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor_module, "_kernel", None)
    monkeypatch.setattr(monitor_module, "_count_inactive", None)


def _stepstats_bodies() -> list[str]:
    from faultbench import _stepstats

    return _stepstats.bodies()


# The kernel's float bodies this build and processor can run (portable, AVX2, AVX-512).
BODIES = [] if monitor_module._kernel is None else _stepstats_bodies()


@pytest.fixture(params=BODIES)
def body(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test on one of the kernel's float bodies, then restore the default."""
    from faultbench import _stepstats

    previous = _stepstats.use(request.param)
    yield request.param
    _stepstats.use(previous)


@pytest.mark.skipif(monitor_module._kernel is None, reason="built without a C compiler")
@pytest.mark.parametrize("task", ["digits", "shapes", "language"])  # mlp, cnn, gru
@pytest.mark.parametrize("fault", ["", "missing_zero_grad", "frozen_layer", "dead_units"])
def test_the_kernel_records_what_the_numpy_path_records(
    task: str, fault: str, body: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _run(task, fault, pack=True)
    assert isinstance(fast._work, _KernelStats)
    with monkeypatch.context() as patch:
        _without_kernel(patch)
        slow = _run(task, fault, pack=True)
    assert isinstance(slow._work, _ChunkedStats)
    _assert_close(fast.trace(), slow.trace())


@pytest.mark.skipif(monitor_module._kernel is None, reason="built without a C compiler")
def test_layers_that_start_off_the_simd_grid_are_recorded_whole(
    body: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 18, 1204 and 2114 weights: the second and third layers start mid-byte of
    # the seen bits, and run over several blocks of 256 with ragged ends.
    def run() -> Trace:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Linear(5, 3), nn.ReLU(), nn.Linear(3, 301), nn.ReLU(), nn.Linear(301, 7)
        )
        with torch.no_grad():
            model[2].weight[:, 1] = 0.0  # a dead input: some weights never get a gradient
        pack_layers(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        monitor = Monitor(model, optimizer)
        generator = torch.Generator().manual_seed(1)
        for _ in range(40):
            x = torch.randn(16, 5, generator=generator)
            x[:, 1] = -1.0
            y = torch.randint(0, 7, (16,), generator=generator)
            loss = F.cross_entropy(model(x), y)
            model.zero_grad(set_to_none=False)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
        monitor.close()
        return monitor.trace()

    fast = run()
    with monkeypatch.context() as patch:
        _without_kernel(patch)
        slow = run()
    assert sum(slow.no_grad_weights.values()) > 0  # so the seen bits are put to the test
    _assert_close(fast, slow)


def _assert_close(a: Trace, b: Trace) -> None:
    """Norms to within float rounding; counts, shares and losses exactly."""
    for name in a.__dataclass_fields__:
        if name in TIMED:
            continue
        x, y = getattr(a, name), getattr(b, name)
        pairs = [(x[k], y[k]) for k in x] if isinstance(x, dict) else [(x, y)]
        for u, v in pairs:
            if name in NORMS:
                np.testing.assert_allclose(u, v, rtol=2e-5, err_msg=name)
            else:  # counts, shares, losses: exactly the same
                np.testing.assert_array_equal(u, v, err_msg=name)


def test_the_kernel_is_built_where_a_c_compiler_is() -> None:
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler: the numpy path is the one in use")
    assert monitor_module._kernel is not None, "setup.py should have built faultbench._stepstats"
    _model, monitor = _small()
    assert isinstance(monitor._work, _KernelStats)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "shape", [(32, 16), (8, 3, 5, 5), (4, 7, 3)]
)  # mlp, cnn and sequence outputs: units are the last dimension
def test_inactive_units_are_counted_as_the_chunked_path_counts_them(
    dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    generator = torch.Generator().manual_seed(0)
    out = torch.relu(torch.randn(shape, generator=generator, dtype=dtype) - 0.8)
    out[..., 0] = 0.0  # one unit certainly inactive
    out.view(-1, shape[-1])[0, 1] = float("nan")  # NaN alone does not make a unit active
    out.view(-1, shape[-1])[1:, 1] = 0.0
    slow = monitor_module._inactive_shares([out])[0]
    fast = monitor_module._inactive_now(out)
    if monitor_module._count_inactive is None:
        assert isinstance(fast, torch.Tensor)  # kept for the chunk instead
    else:
        assert fast == slow
    assert 2 / shape[-1] <= slow < 1
    # A view the kernel cannot read in place goes the chunked way.
    assert isinstance(monitor_module._inactive_now(out.transpose(0, -1)), torch.Tensor)


def test_a_float64_model_is_recorded_in_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    def run() -> Trace:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).double()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        monitor = Monitor(model, optimizer)
        x, y = torch.randn(16, 4, dtype=torch.float64), torch.randint(0, 3, (16,))
        for _ in range(40):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
        return monitor.trace()

    fast = run()
    with monkeypatch.context() as patch:
        _without_kernel(patch)
        slow = run()
    for name in fast.grad_norm:
        np.testing.assert_allclose(fast.grad_norm[name], slow.grad_norm[name], rtol=1e-12)
        np.testing.assert_allclose(fast.update_ratio[name], slow.update_ratio[name], rtol=1e-12)
    np.testing.assert_array_equal(fast.inactive_share, slow.inactive_share)


def test_kernel_rows_gathered_in_smaller_blocks_give_the_same_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    whole = _trace("digits", "dead_units", pack=True)
    monkeypatch.setattr(monitor_module, "KERNEL_ROWS", 16)  # blocks of 32 (the floor): 70 steps, 3
    _assert_same(_trace("digits", "dead_units", pack=True), whole)


def test_outputs_the_kernel_cannot_read_are_kept_one_chunk_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def run(steps: int) -> tuple[Trace, int]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).to(torch.bfloat16)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        monitor = Monitor(model, optimizer)
        x, y = torch.randn(16, 4).to(torch.bfloat16), torch.randint(0, 3, (16,))
        most = 0
        for _ in range(steps):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x).float(), y)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
            most = max(most, len(monitor._acts))
        return monitor.trace(), most

    trace, most = run(STEPS)
    assert most <= monitor_module.CHUNK_STEPS  # bf16 outputs are kept as tensors until reduced
    assert len(trace.inactive_share) == STEPS and np.isfinite(trace.grad_norm["0"]).all()
    with monkeypatch.context() as patch:
        _without_kernel(patch)
        slow, _ = run(STEPS)
    np.testing.assert_array_equal(trace.inactive_share, slow.inactive_share)
    np.testing.assert_allclose(trace.grad_norm["2"], slow.grad_norm["2"], rtol=1e-6)


@pytest.mark.parametrize("compiler", ["false", "cc"])
def test_the_kernel_is_optional_at_install(compiler: str, tmp_path: Path) -> None:
    """With no working C compiler the build warns and succeeds (the monitor then
    uses its numpy path); with one, it builds the extension."""
    if compiler == "cc" and not shutil.which("cc"):
        pytest.skip("no C compiler here")
    root = Path(__file__).resolve().parent.parent
    into = ["--build-lib", str(tmp_path / "lib"), "--build-temp", str(tmp_path / "tmp")]
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", *into],
        cwd=root,
        env={**os.environ, "CC": compiler},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    built = list((tmp_path / "lib").rglob("_stepstats*"))
    if compiler == "false":
        assert not built and "failed" in done.stdout + done.stderr
    else:
        assert len(built) == 1
