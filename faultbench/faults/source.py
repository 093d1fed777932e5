"""The code a fault runs, as text: what goes into the cache key of the runs it touches.

A variant's transform is rarely all of its code: it wraps a part with a
helper, reads a constant, builds a small class. So the hash follows every
name the code uses to the functions, classes and plain constants it means,
across the fault modules (and a plug-in's own module), and hashes all of
their code (:func:`~faultbench.core.codetext.code_text`: the text without its
docstrings and comments). Editing a helper retrains the runs of the variants
that use it, and no others; rewording its docstring or a comment retrains
nothing. The recipe's healthy parts are not followed: they belong to every run
and are hashed with the training code.
"""

from __future__ import annotations

import hashlib
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

from faultbench.core.codetext import code_text

_SHARED = (  # in every run's key
    "faultbench.faults.recipe",
    "faultbench.faults.architectures",
    "faultbench.faults.tokens",
    "faultbench.faults.transformer",
)
_CONSTANT = (int, float, str, bool, tuple, frozenset, type(None))


def code_hash(functions: list[Callable[..., Any]]) -> str:
    """A short hash of ``functions`` and of everything of theirs they use."""
    sources: dict[str, str] = {}
    todo: list[Any] = list(functions)
    while todo:
        obj = todo.pop()
        key = f"{obj.__module__}.{obj.__qualname__}"
        if key in sources:
            continue
        sources[key] = code_text(inspect.getsource(obj))
        for name, value in _globals_used(obj):
            if _followed(value, obj):
                todo.append(value)
            elif isinstance(value, _CONSTANT) and not name.startswith("__"):
                sources.setdefault(f"{obj.__module__}.{name}", repr(value))
    digest = hashlib.sha256()
    for key in sorted(sources):
        digest.update(f"{key}\n{sources[key]}\n".encode())
    return digest.hexdigest()[:12]


def _followed(value: Any, user: Any) -> bool:
    """Whether ``value`` is code of a fault (or of ``user``'s own module) to hash too."""
    if not (inspect.isfunction(value) or inspect.isclass(value)):
        return False
    module = getattr(value, "__module__", "") or ""
    if module in _SHARED:
        return False
    return module == user.__module__ or module.startswith("faultbench.faults.")


def _globals_used(obj: Any) -> Iterator[tuple[str, Any]]:
    """(name, value) of every module-level name the code of ``obj`` reads."""
    if inspect.isclass(obj):
        members = [m for m in vars(obj).values() if inspect.isfunction(m)]
        module_vars = vars(inspect.getmodule(obj) or types.ModuleType("none"))
        for member in members:
            for name in _names(member.__code__):
                if name in module_vars:
                    yield name, module_vars[name]
        return
    scope = getattr(obj, "__globals__", {})
    for name in _names(obj.__code__):
        if name in scope:
            yield name, scope[name]


def _names(code: types.CodeType) -> Iterator[str]:
    """Global names read by ``code`` and by the functions and lambdas nested in it."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)
