"""Shared by every layer: the error type the CLI turns into one line, the registry, and
source text as the cache keys hash it (:mod:`faultbench.core.codetext`)."""
