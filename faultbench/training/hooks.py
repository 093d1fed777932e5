"""Forward hooks that a copy of the model does not carry along.

``copy.deepcopy(model)`` and ``pickle`` copy a module's hooks with it, so a
monitored model's copy (an EMA model, a checkpoint, a probe's rebuild) would
report its forwards to the original monitor, or fail to pickle at all. A
:class:`Hook` copies as an :class:`Inert` one instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

HookFn = Callable[[nn.Module, Any, Any], None]


class Inert:
    """What a copied :class:`Hook` becomes: a hook that does nothing."""

    def __call__(self, module: nn.Module, args: Any, out: Any) -> None:
        return None


class Hook:
    """A forward hook calling ``fn(module, args, output)``, inert in any copy."""

    def __init__(self, fn: HookFn) -> None:
        self.fn = fn

    def __call__(self, module: nn.Module, args: Any, out: Any) -> None:
        self.fn(module, args, out)

    def __reduce__(self) -> tuple[type[Inert], tuple[()]]:
        return Inert, ()

    def __deepcopy__(self, memo: dict[int, Any]) -> Inert:
        return Inert()
