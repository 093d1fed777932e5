"""Shared by every layer: the error type the CLI turns into one line, the registry,
source text as the cache keys hash it (:mod:`~faultbench.core.codetext`) and the CPU
kernels every training process pins (:mod:`~faultbench.core.kernels`)."""
