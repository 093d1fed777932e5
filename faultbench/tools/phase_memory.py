"""Peak memory and duration of one phase: the process high-water mark on CPU,
the allocator's peaks on CUDA (allocated and reserved reported apart)."""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

MIB = 2**20


class PeakMemory:
    """Process high-water mark, reset per phase where Linux allows it."""

    def __init__(self) -> None:
        self.resettable = self._reset()
        self.note = (
            "CPU: process high-water mark (VmHWM), reset per phase"
            if self.resettable
            else "CPU: process high-water mark since start (cannot reset here)"
        )

    @staticmethod
    def _reset() -> bool:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # "5" resets VmHWM to the current RSS
            return True
        except OSError:
            return False

    def reset(self) -> None:
        if self.resettable:
            self._reset()

    def peak_mib(self) -> float:
        if self.resettable:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / MIB
        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / MIB


MEMORY = PeakMemory()  # one meter per process: the high-water mark is process-wide


@contextmanager
def metered(device: torch.device) -> Iterator[dict[str, float | None]]:
    """Time the block and measure its peak memory into the yielded dict."""
    out: dict[str, float | None] = {}
    MEMORY.reset()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    try:
        yield out
    finally:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            # Allocated (live tensors) and reserved (the caching allocator's pool) are
            # different questions; adding them would count the same bytes twice.
            out["cuda_max_allocated_mib"] = torch.cuda.max_memory_allocated(device) / MIB
            out["cuda_max_reserved_mib"] = torch.cuda.max_memory_reserved(device) / MIB
        out["seconds"] = time.perf_counter() - start
        out["peak_rss_mib"] = MEMORY.peak_mib()
