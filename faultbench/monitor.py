"""Instrumentation for any PyTorch training loop, and the benchmark's own.

Three added lines in a user's loop::

    monitor = Monitor(model, optimizer)
    for xb, yb in monitor.batches(loader):   # times the wait for data
        ...; optimizer.step()
        monitor.step(loss)                   # after the update, before zero_grad

The benchmark's loop uses exactly this class, so what a diagnoser is scored on
is what it will see on a user's run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from faultbench.trace import RunConfig, Trace

B = TypeVar("B")


class Monitor:
    """Records a :class:`Trace` of a training loop.

    Args:
        model: The model being trained. Every ``nn.Linear`` is a "layer";
            every ``nn.ReLU`` output is checked for inactive units.
        optimizer: The optimizer; a pre-step hook snapshots the weights so
            that update sizes can be measured.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer
        self.layers = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
        self._params = [list(m.parameters()) for m in self.layers.values()]
        self._flat = [p for ps in self._params for p in ps]
        self._init = [p.detach().clone() for p in self._flat]
        self._before: list[torch.Tensor] = []
        self._grad_seen = [torch.zeros_like(p) for p in self._flat]
        self._rows: list[torch.Tensor] = []
        self._inactive: list[torch.Tensor] = []
        self._batch_inactive: list[torch.Tensor] = []
        self._wait: list[float] = []
        self._compute: list[float] = []
        self._evals: list[tuple[int, float, float, float]] = []
        self._input_stats: dict[str, float] = {}
        self._batch_size = 0
        self._ready = 0.0
        self._hooks = [optimizer.register_step_pre_hook(self._snapshot)]
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                self._hooks.append(module.register_forward_hook(self._count_inactive))

    # -- hooks -----------------------------------------------------------------
    def _snapshot(self, *_: Any) -> None:
        self._before = [p.detach().clone() for p in self._flat]

    def _count_inactive(self, module: nn.Module, _inp: Any, out: torch.Tensor) -> None:
        if module.training and out.dim() >= 2:
            alive = (out.detach() > 0).flatten(0, -2).any(dim=0)
            self._batch_inactive.append(1.0 - alive.float().mean())

    # -- the three calls a loop makes ------------------------------------------
    def batches(self, iterable: Iterable[B]) -> Iterator[B]:
        """Yield from ``iterable``, timing how long each batch takes to arrive."""
        iterator = iter(iterable)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self._ready = time.perf_counter()
            self._wait.append(self._ready - start)
            if not self._input_stats:
                self._first_batch(batch)
            yield batch

    def step(self, loss: torch.Tensor | float) -> None:
        """Record one optimizer update; call it after ``optimizer.step()``."""
        self._compute.append(time.perf_counter() - (self._ready or time.perf_counter()))
        if len(self._wait) < len(self._compute):  # loop not using batches()
            self._wait.append(0.0)
        loss_t = loss.detach().reshape(()) if isinstance(loss, torch.Tensor) else torch.tensor(loss)
        with torch.no_grad():
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._flat]
            torch._foreach_add_(self._grad_seen, torch._foreach_abs(grads))
            zeros = torch.stack([(g == 0).sum() for g in grads]).sum()
            gnorm = torch._foreach_norm(grads)
            before = self._before or self._init
            delta = torch._foreach_norm(torch._foreach_sub([p.detach() for p in self._flat], before))
            wnorm = torch._foreach_norm(before)
            self._rows.append(torch.stack([loss_t.float(), zeros.float(), *gnorm, *delta, *wnorm]))
        self._inactive.append(
            torch.stack(self._batch_inactive).mean() if self._batch_inactive else torch.tensor(0.0)
        )
        self._batch_inactive = []
        self._before = []

    def log_eval(self, *, train_acc: float, val_acc: float, val_loss: float = float("nan")) -> None:
        """Record an evaluation made after the latest step."""
        self._evals.append((len(self._compute), train_acc, val_acc, val_loss))

    # -- results ---------------------------------------------------------------
    def _first_batch(self, batch: Any) -> None:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            x = x.detach().double()
            self._input_stats = {
                "mean": float(x.mean()),
                "std": float(x.std()) if x.numel() > 1 else 0.0,
                "abs_max": float(x.abs().max()),
            }
            self._batch_size = int(x.shape[0])
        else:
            self._input_stats = {"mean": float("nan"), "std": float("nan"), "abs_max": float("nan")}

    def config(self) -> RunConfig:
        """The observable configuration of the monitored run."""
        linears = list(self.layers.values())
        group = self.optimizer.param_groups[0]
        return RunConfig(
            optimizer=type(self.optimizer).__name__,
            lr=float(group["lr"]),
            batch_size=self._batch_size,
            steps=len(self._compute),
            n_classes=int(linears[-1].out_features) if linears else 0,
            layer_widths=tuple(
                [int(linears[0].in_features)] + [int(m.out_features) for m in linears]
            )
            if linears
            else (),
            param_count=sum(p.numel() for p in self.model.parameters()),
        )

    def trace(self) -> Trace:
        """The trace recorded so far."""
        names = list(self.layers)
        counts = [len(ps) for ps in self._params]
        rows = torch.stack(self._rows).double().numpy() if self._rows else np.zeros((0, 2))
        n = len(self._flat)
        grad, delta, weight = (rows[:, 2 + i * n : 2 + (i + 1) * n] for i in range(3))
        evals = np.array(self._evals, dtype=np.float64).reshape(-1, 4)
        return Trace(
            loss=rows[:, 0],
            grad_norm=_per_layer(names, counts, grad),
            update_ratio=_ratio(_per_layer(names, counts, delta), _per_layer(names, counts, weight)),
            zero_grad_share=rows[:, 1] / max(1, sum(p.numel() for p in self._flat)),
            inactive_share=torch.stack(self._inactive).double().numpy()
            if self._inactive
            else np.zeros(0),
            wait_seconds=np.array(self._wait[: len(self._compute)]),
            compute_seconds=np.array(self._compute),
            eval_steps=evals[:, 0],
            train_acc=evals[:, 1],
            val_acc=evals[:, 2],
            val_loss=evals[:, 3],
            input_stats=dict(self._input_stats),
            no_grad_weights=self._no_grad_counts(),
            weight_change=self._weight_change(),
            weight_count={
                name: sum(p.numel() for p in ps) for name, ps in zip(names, self._params)
            },
        )

    def _no_grad_counts(self) -> dict[str, int]:
        out, i = {}, 0
        for name, ps in zip(self.layers, self._params):
            out[name] = int(sum(int((s == 0).sum()) for s in self._grad_seen[i : i + len(ps)]))
            i += len(ps)
        return out

    def _weight_change(self) -> dict[str, float]:
        out, i = {}, 0
        for name, ps in zip(self.layers, self._params):
            init = self._init[i : i + len(ps)]
            moved = sum(float((p.detach() - p0).norm() ** 2) for p, p0 in zip(ps, init))
            size = sum(float(p0.norm() ** 2) for p0 in init)
            out[name] = (moved / size) ** 0.5 if size > 0 else float(moved > 0)
            i += len(ps)
        return out

    def close(self) -> None:
        """Remove the hooks this monitor put on the model and optimizer."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


def _per_layer(names: list[str], counts: list[int], cols: np.ndarray) -> dict[str, np.ndarray]:
    # Parameters of one layer (weight, bias) combine into one L2 norm.
    out, i = {}, 0
    for name, c in zip(names, counts):
        out[name] = np.sqrt((cols[:, i : i + c] ** 2).sum(axis=1))
        i += c
    return out


def _ratio(num: dict[str, np.ndarray], den: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return {k: np.where(den[k] > 0, num[k] / den[k], 0.0) for k in num}
