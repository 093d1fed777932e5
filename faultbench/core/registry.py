"""A plain name -> entry registry, filled by a decorator and by plug-ins (Gymnasium-style).

Each registry (faults, tasks, diagnosers) may name a module of shipped entries
and an entry-point group of plug-ins. Both load only when a name is looked up
or listed, never at ``import faultbench``: a broken plug-in must not break the
import, the CLI's ``--help`` or any other entry. A plug-in that fails to load
is kept in :attr:`Registry.broken` with its one-line reason, for ``faultbench
list`` to show and for a lookup of that name to report.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from faultbench.core.errors import FaultbenchError, unknown_name

T = TypeVar("T")


def _as_is(name: str, obj: object) -> object:
    return obj


class Registry(Generic[T]):
    """Maps names to entries of one kind (faults, tasks, diagnosers).

    Registering a name twice raises instead of silently replacing the first
    entry: two plug-ins that pick the same name must not shadow each other.

    Args:
        kind: What an entry is, for messages ("fault").
        builtin: Module whose import registers the shipped entries, imported
            by name on first use (so this layer does not import a layer above).
        group: Entry-point group of plug-ins (``faultbench.faults``).
        adapt: Turns a loaded plug-in object into an entry, or raises
            ``TypeError`` saying what was expected.
    """

    def __init__(
        self,
        kind: str,
        *,
        builtin: str | None = None,
        group: str | None = None,
        adapt: Callable[[str, object], T] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self._builtin = builtin
        self._adapt: Callable[[str, object], T] = adapt or _as_is  # type: ignore[assignment]
        self._entries: dict[str, T] = {}
        self._builtin_loaded = builtin is None
        self._plugins_loaded = group is None
        self.broken: dict[str, str] = {}  # plug-in name -> why it did not load (one line)

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
        """Return the entry for ``name``, or raise with the nearest valid name.

        Raises:
            FaultbenchError: the name is unknown, or its plug-in failed to load.
        """
        self._load_builtin()
        if name not in self._entries:
            self._load_plugins()
        if name in self._entries:
            return self._entries[name]
        if name in self.broken:
            raise FaultbenchError(
                f"{self.kind} plug-in '{name}' failed to load: {self.broken[name]}"
            )
        raise unknown_name(self.kind, name, self._entries)

    def names(self) -> list[str]:
        """Registered names (shipped first, then plug-ins), in registration order."""
        self._load_builtin()
        self._load_plugins()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def _load_builtin(self) -> None:
        if not self._builtin_loaded:
            self._builtin_loaded = True
            importlib.import_module(str(self._builtin))

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=str(self.group)):
            if ep.name in self._entries:
                continue  # a shipped entry of the same name wins; the plug-in is not loaded
            try:
                self._load_plugin(ep)
            except Exception as exc:  # any failure of a plug-in is its own, not ours
                first_line = (str(exc).strip().splitlines() or [""])[0]
                self.broken[ep.name] = f"{ep.value}: {type(exc).__name__}: {first_line}"

    def _load_plugin(self, ep: EntryPoint) -> None:
        obj = ep.load()
        if ep.name not in self._entries:  # a module may register itself on import
            self.add(ep.name, self._adapt(ep.name, obj))
