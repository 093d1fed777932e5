"""The CPU kernels a benchmark run trains with: pinned, so its trace is the same bits on
any x86-64 CPU.

torch chooses its CPU kernels by what the processor can do, in three places, and
each choice changes the last bits of a sum: ATen's own vectorized kernels (none,
AVX2 or AVX-512), MKL's matrix products (the linear and recurrent layers, and the
convolutions ATen unrolls into them) and oneDNN's and NNPACK's convolutions (code
generated for the processor). On an AVX-512 machine imitating an AVX2 one
(``ATEN_CPU_CAPABILITY=avx2``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``,
``ONEDNN_MAX_CPU_ISA=AVX2``) each of the three changed the losses of a healthy run, and
the shapes CNN ended at up to twice the loss. Pinned, every imitation (AVX-512, AVX2,
SSE4.2) trained the digits, synthetic, shapes and language runs to the same bits:

- ATen: ``ATEN_CPU_CAPABILITY=default``, the kernels every x86-64 CPU runs;
- MKL: ``MKL_CBWR=COMPATIBLE``, its reproducibility mode (the same results on every
  Intel or compatible processor, at a fixed number of threads: the loop trains on one);
- oneDNN and NNPACK are off while a run trains (:func:`backends`), so convolutions run
  ATen's own way (unrolled into an MKL product).

What it costs against the processor's own kernels (``python bench/kernels_cost.py``:
thread CPU time of a healthy run, fresh processes, interleaved, median of 8 rounds on a
busy 2-core AVX-512 machine): 1.12x a digits run, 1.19x a shapes run; 1.30x a language
run and 1.05x a synthetic one (4 rounds).

torch reads the two variables at its first operation, and MKL at its first call, so
:func:`pin` must come before a process runs torch: the command line pins itself first
thing, the local engine's and a local Dask cluster's workers before they import
torch, the test suite in its ``conftest.py``; a process started by a pinned one
inherits the pin. A process in which torch already ran with other kernels cannot be
pinned: :func:`require` refuses to train a benchmark run there (:class:`Unpinned`)
rather than store a run that another machine would not reproduce. ATen says which
kernels it runs (``torch.backends.cpu.get_cpu_capability()``), which is what
:func:`require` checks; MKL cannot be asked, and is pinned wherever ATen was pinned
before the process's first torch operation.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from faultbench.core.errors import FaultbenchError

#: The environment of a pinned process.
ENVIRONMENT = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
CAPABILITY = "DEFAULT"  # what torch.backends.cpu.get_cpu_capability() says once pinned


class Unpinned(FaultbenchError):
    """This process's torch runs CPU kernels other than the pinned ones."""


def pin() -> None:
    """Pin this process's CPU kernels (and those of every process it starts).

    Effective before this process's first torch operation (see the module's text);
    it overrides any value of these variables set before.
    """
    os.environ.update(ENVIRONMENT)


def capability() -> str:
    """The kernels ATen runs in this process: ``DEFAULT``, ``AVX2``, ``AVX512``, ...

    Asking fixes them, if no torch operation did before.
    """
    import torch

    return torch.backends.cpu.get_cpu_capability()


def require() -> None:
    """Pin this process if torch has not run yet, and refuse if it cannot be pinned.

    Raises:
        Unpinned: torch already ran here with other kernels.
    """
    pin()
    found = capability()
    if found != CAPABILITY:
        fix = " ".join(f"{k}={v}" for k, v in ENVIRONMENT.items())
        raise Unpinned(
            f"this process runs torch's {found} CPU kernels, not the pinned {CAPABILITY} "
            "ones (torch ran before faultbench could pin them), so its runs would not be "
            "the same bits on another machine: train on the local engine "
            "(engine=make_engine('local')), whose workers are pinned, or set "
            f"{fix} before the process runs torch"
        )


@contextlib.contextmanager
def backends() -> Iterator[None]:
    """oneDNN and NNPACK off while inside (their convolutions are generated per
    processor); the caller's settings after."""
    import torch

    onednn = torch.backends.mkldnn.enabled
    nnpack = torch.backends.nnpack.set_flags(False)[0]
    torch.backends.mkldnn.enabled = False  # type: ignore[assignment]  # typed as its descriptor
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = onednn
        torch.backends.nnpack.set_flags(nnpack)
