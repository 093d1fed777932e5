"""Defaults shared by the scorer and the command line (kept here so ``--help`` stays light)."""

DEFAULT_TIMEOUT = 60.0  # seconds one diagnosis may take (``--timeout``)
