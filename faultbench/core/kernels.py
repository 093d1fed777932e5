"""The CPU kernels a benchmark run trains with: pinned, so its trace is the same bits on
any Intel x86-64 CPU with AVX2 (not on another vendor's: see MKL below).

torch chooses its CPU kernels by what the processor can do, in three places, and
each choice changes the last bits of a sum: ATen's own vectorized kernels (none,
AVX2 or AVX-512), MKL's matrix products (the linear and recurrent layers, and the
convolutions ATen unrolls into them) and oneDNN's and NNPACK's convolutions (code
generated for the processor). On an AVX-512 machine imitating an AVX2 one
(``ATEN_CPU_CAPABILITY=avx2``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``,
``ONEDNN_MAX_CPU_ISA=AVX2``) each of the three changed the losses of a healthy run, and
the shapes CNN ended at up to twice the loss. Pinned, the AVX-512 machine and its AVX2
imitation trained digits, shapes, language and numbers runs to the same bits:

- ATen: ``ATEN_CPU_CAPABILITY=avx2``, the vectorized kernels of every x86-64 processor
  with AVX2 (Intel's since 2013, AMD's since 2015), AVX-512 ones included;
- MKL: ``MKL_CBWR=AVX2``, its reproducibility mode for that branch (the same results on
  every Intel processor that supports AVX2, at a fixed number of threads: the loop trains on
  one). Intel's documentation says branches other than AUTO and COMPATIBLE exist on Intel's
  processors only; elsewhere MKL runs AUTO. Measured on an AMD EPYC (AVX2): every
  ``MKL_CBWR`` but COMPATIBLE trained AUTO's bits, and the runs of the same keys were other
  bits than results/'s (docs/reproducibility.md). COMPATIBLE is the one branch every vendor
  runs, at the cost measured below;
- oneDNN and NNPACK are off while a run trains (:func:`backends`), so convolutions run
  ATen's own way (unrolled into an MKL product).

The pin is AVX2, not the scalar kernels every x86-64 processor runs
(``ATEN_CPU_CAPABILITY=default`` with ``MKL_CBWR=COMPATIBLE``): those cost 2.7x a
transformer run (MKL's compatible branch alone 2x), which the benchmark's cold report
cannot afford; a processor without AVX2 reports ``DEFAULT`` kernels and is refused
(:func:`require`). What the pin costs against the processor's own kernels is measured by
``python bench/kernels_cost.py`` (README, "Results and the paper").

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
ENVIRONMENT = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
CAPABILITY = "AVX2"  # what torch.backends.cpu.get_cpu_capability() says once pinned


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
