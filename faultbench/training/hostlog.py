"""Per-step values kept where they were computed and read in blocks.

Reading a tensor that lives on an accelerator (``.item()``, ``float()``,
``.cpu()``) makes the host wait until the device has finished everything
queued before it: once per step, that wait is the whole point of an
asynchronous device lost. A :class:`DeviceLog` only stacks a block of rows on
their device and starts a non-blocking copy to the host; nothing is read
until :meth:`DeviceLog.read`, which waits for the device once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

BLOCK_STEPS = 64  # rows stacked into one tensor (one copy to the host) at a time


class DeviceLog:
    """Rows of equal shape, one per ``append``, read back as one float64 array."""

    def __init__(self, width: int) -> None:
        self.width = width  # values per row
        self._rows: list[torch.Tensor] = []  # this block's rows, where they were made
        self._host: list[torch.Tensor] = []  # earlier blocks, copied (or being copied) to the host
        self._devices: set[torch.device] = set()  # accelerators the copies come from

    def __len__(self) -> int:
        return sum(len(h) for h in self._host) + len(self._rows)

    def append(self, row: torch.Tensor) -> None:
        """Keep one row (a tensor of ``width`` values, or a scalar when ``width`` is 1)."""
        self._rows.append(row)
        if len(self._rows) >= BLOCK_STEPS:
            self.flush()

    def extend(self, rows: torch.Tensor) -> None:
        """Keep a block of rows, already stacked as (rows, width), at once."""
        self.flush()
        self._send(rows)

    def flush(self) -> None:
        """Send this block's rows to the host without waiting for them."""
        rows, self._rows = self._rows, []
        if not rows:
            return
        if len({r.device for r in rows}) == 1:
            self._send(torch.stack(rows))  # one stack and one copy per block
        else:  # e.g. a loss given as a float on one step, a device tensor on another
            for r in rows:
                self._send(r[None])

    def _send(self, block: torch.Tensor) -> None:
        if block.device.type != "cpu":
            self._devices.add(block.device)
        # On CUDA a non-blocking copy lands in pinned memory; it is complete once
        # the device has caught up, which read() waits for.
        self._host.append(block.reshape(len(block), self.width).to("cpu", non_blocking=True))

    def read(self) -> np.ndarray:
        """Every row so far, as a (rows, width) float64 array; waits for the device once."""
        self.flush()
        for device in self._devices:
            torch.accelerator.synchronize(device)
        self._devices.clear()
        if not self._host:
            return np.zeros((0, self.width))
        whole = torch.cat([h.to(torch.float64) for h in self._host])
        self._host = [whole]  # later reads start from here
        return whole.numpy().copy()


def averaged(values: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """Average consecutive rows of ``values`` in groups of ``counts`` (NaN for a group of 0)."""
    counts_array = np.asarray(counts, dtype=np.int64)
    out = np.full((len(counts_array), values.shape[1]), np.nan)
    if not len(values):
        return out
    owner = np.repeat(np.arange(len(counts_array)), counts_array)
    sums = np.zeros_like(out)
    np.add.at(sums, owner, values[: len(owner)])
    filled = counts_array > 0
    out[filled] = sums[filled] / counts_array[filled, None]
    return out
