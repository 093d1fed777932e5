"""Does an accelerator pay for this job? Time the same training on every device.

The same MLP step (forward, cross-entropy, backward, Adam) runs at growing
widths and batch sizes on the CPU and on each accelerator present. Batches
start on the CPU every step, as a loader hands them over, so the transfer is
part of the time: a GPU that wins on compute can still lose on small batches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.core.errors import FaultbenchError, unknown_name

FEATURES = 64  # digits-sized inputs
CLASSES = 10  # digits-sized outputs
WIDTHS = (64, 512, 4096)  # hidden widths timed
BATCHES = (32, 256, 1024)  # batch sizes timed
STEPS = 20  # timed steps per size
WARMUP = 2  # untimed steps first (allocator, kernels, lazy CUDA init)
QUICK_WIDTHS = (64, 512)  # --quick: a smoke test, not a measurement
QUICK_BATCHES = (32, 256)  # --quick batch sizes
QUICK_STEPS = 3  # --quick timed steps


PAYS = 1.25  # speedup over the CPU that counts as paying off, beyond timing noise


@dataclass(frozen=True)
class DeviceTable:
    """Seconds per step for every (device, width, batch), and where an accelerator pays."""

    rows: pd.DataFrame  # device, hidden, batch, ms_per_step, examples_per_s, speedup_vs_cpu
    accelerators: tuple[str, ...]  # devices other than the CPU that were timed

    def pays_from(self, device: str) -> tuple[int, int] | None:
        """The smallest (hidden, batch), by work, where ``device`` clearly beats the CPU.

        "Clearly" is a speedup of at least ``PAYS``: a 1.01x win is timing noise,
        not a reason to rent an accelerator. None if it never does.
        """
        rows = self.rows[(self.rows["device"] == device) & (self.rows["speedup_vs_cpu"] >= PAYS)]
        if rows.empty:
            return None
        first = rows.assign(work=rows["hidden"] * rows["batch"]).sort_values("work").iloc[0]
        return int(first["hidden"]), int(first["batch"])

    def __str__(self) -> str:
        lines = []
        if not self.accelerators:
            lines.append("No accelerator found (CUDA and MPS unavailable): CPU rows only.")
        table = self.rows.to_string(index=False, float_format=lambda v: f"{v:,.2f}")
        lines.append(table)
        for device in self.accelerators:
            where = self.pays_from(device)
            lines.append(
                f"{device}: never {PAYS:g}x faster than the CPU at these sizes"
                if where is None
                else f"{device} starts to pay at hidden {where[0]}, batch {where[1]} "
                f"(smallest size where it is at least {PAYS:g}x faster than the CPU, "
                "transfers included)"
            )
        return "\n".join(lines)


def available_devices() -> list[str]:
    """The CPU, then CUDA and MPS where present."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def compare_devices(
    widths: tuple[int, ...] = WIDTHS,
    batches: tuple[int, ...] = BATCHES,
    *,
    steps: int = STEPS,
    devices: list[str] | None = None,
) -> DeviceTable:
    """Time training steps at every (width, batch) on every device.

    Args:
        widths: Hidden-layer widths.
        batches: Batch sizes.
        steps: Timed steps per size (after a short untimed warm-up).
        devices: Which devices; all available ones when None.

    Raises:
        FaultbenchError: steps below 1, an empty size list, or an unavailable device.
    """
    if steps < 1 or not widths or not batches:
        raise FaultbenchError(
            f"need steps >= 1 and at least one width and batch; got steps={steps}, "
            f"widths={widths}, batches={batches}"
        )
    usable = available_devices()
    for device in devices or ():
        if device not in usable:
            raise unknown_name("device (available here)", device, usable)
    devices = devices or usable
    records = [
        {"device": d, "hidden": w, "batch": b, "ms_per_step": 1e3 * time_steps(d, w, b, steps)}
        for d in devices
        for w in widths
        for b in batches
    ]
    rows = pd.DataFrame(records)
    rows["examples_per_s"] = rows["batch"] / (rows["ms_per_step"] / 1e3)
    cpu = rows[rows["device"] == "cpu"].set_index(["hidden", "batch"])["ms_per_step"]
    rows["speedup_vs_cpu"] = [
        cpu.get((w, b), float("nan")) / ms
        for w, b, ms in zip(rows["hidden"], rows["batch"], rows["ms_per_step"], strict=True)
    ]
    return DeviceTable(rows, tuple(d for d in devices if d != "cpu"))


def time_steps(device: str, hidden: int, batch: int, steps: int) -> float:
    """Mean seconds of one training step, batch transfer included."""
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(batch * 4, FEATURES, generator=gen)  # stays on the CPU, like a loader's
    y = torch.randint(CLASSES, (batch * 4,), generator=gen)
    model = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, CLASSES))
    model.to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for i in range(WARMUP + steps):
        if i == WARMUP:
            _sync(dev)
            start = time.perf_counter()
        lo = (i % 4) * batch
        xb, yb = X[lo : lo + batch].to(dev), y[lo : lo + batch].to(dev)
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    _sync(dev)  # GPU work is asynchronous: stop the clock only when it is done
    return (time.perf_counter() - start) / steps


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
