"""Shared by every layer: the error type the CLI turns into one line, and the registry."""
