"""A plain name -> entry registry, filled by a decorator (Gymnasium-style)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from faultbench.errors import unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to entries of one kind (faults, tasks, diagnosers).

    Registering a name twice raises instead of silently replacing the first
    entry: two plug-ins that pick the same name must not shadow each other.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name``; raise if the name is taken."""
        if name in self._entries:
            raise ValueError(f"{self.kind} '{name}' is already registered")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""

        def decorate(entry: T) -> T:
            return self.add(name, entry)

        return decorate

    def get(self, name: str) -> T:
        """Return the entry for ``name``, or raise with the nearest valid name."""
        try:
            return self._entries[name]
        except KeyError:
            raise unknown_name(self.kind, name, self._entries) from None

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
