"""Faults: named transforms of a run's setup, each with at most one severity knob.

A fault never touches the training loop's code: it changes the data, the model
recipe, the optimizer settings, a loop flag or the loader, exactly where the
bug would live in a real project. Faults compose: a condition is a sequence of
(fault, severity) pairs applied in order; ``healthy`` is the empty sequence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from faultbench.core.errors import FaultbenchError
from faultbench.core.registry import Registry
from faultbench.tasks.task import Task

HEALTHY = "healthy"


@dataclass(frozen=True, eq=False)
class RunSetup:
    """Everything one training run needs; faults return modified copies."""

    seed: int  # seeds the model init, the batch order and the probe
    n_classes: int  # width of the output layer
    X_train: np.ndarray  # inputs the loop trains on
    y_train: np.ndarray  # labels the loop trains on
    X_val: np.ndarray  # inputs the run validates on
    y_val: np.ndarray  # labels the run validates on
    hidden: int  # width of the ReLU hidden layer
    architecture: str  # model recipe (see faultbench.training.architectures)
    image_side: int  # side of square images, for the "cnn" recipe
    lr: float  # Adam's learning rate
    batch_size: int  # examples per update
    steps: int  # optimizer updates
    zero_grad: bool = True  # clear gradients before each backward pass
    softmax_head: bool = False  # the model ends in a softmax (probabilities out)
    dead_fraction: float = 0.0  # share of hidden units whose bias starts below any input
    frozen_layers: tuple[str, ...] = ()  # layers left out of the optimizer
    batch_delay: float = 0.0  # seconds the loader spends producing each batch

    def replace(self, **changes: object) -> RunSetup:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def base_setup(task: Task, seed: int) -> RunSetup:
    """The healthy setup of ``task`` for one seed."""
    d = task.defaults
    return RunSetup(
        seed=seed,
        n_classes=task.n_classes,
        X_train=task.X_train,
        y_train=task.y_train,
        X_val=task.X_val,
        y_val=task.y_val,
        hidden=d.hidden,
        architecture=d.architecture,
        image_side=d.image_side,
        lr=d.lr,
        batch_size=d.batch_size,
        steps=d.steps,
    )


@dataclass(frozen=True)
class Severity:
    """The valid range and canonical value of a fault's one knob."""

    canonical: float  # the benchmark's default: visible on digits in every seed
    low: float  # smallest valid value
    high: float  # largest valid value
    meaning: str  # what the number is, in a few words
    worse_when_higher: bool = True  # False where a smaller value is the worse fault

    def milder_to_worse(self, values: Sequence[float]) -> list[float]:
        """``values`` sorted from the mildest to the most severe."""
        return sorted(values, reverse=not self.worse_when_higher)

    def grid(self, n: int = 6) -> list[float]:
        """``n`` values spanning the valid range (log-spaced), canonical included, mild first."""
        if self.low > 0 and self.high / self.low > 20:
            values = np.geomspace(self.low, self.high, n)
        else:
            values = np.linspace(self.low, self.high, n)
        if float(self.high).is_integer() and float(self.low).is_integer():
            values = np.unique(np.round(values))
        points = {float(f"{v:.3g}") for v in values} | {self.canonical}
        return self.milder_to_worse(sorted(points))

    def check(self, fault: str, value: float) -> float:
        """Return ``value`` as a float, or raise if it is outside the range."""
        if not self.low <= value <= self.high:
            raise FaultbenchError(
                f"Severity {value:g} is out of range for fault '{fault}'; expected "
                f"{self.low:g} to {self.high:g} ({self.meaning}), canonical {self.canonical:g}"
            )
        return float(value)


@dataclass(frozen=True)
class Fault:
    """A registered fault: its transform, its knob and what it breaks."""

    name: str  # registry name, also the label a diagnoser should answer
    summary: str  # what is broken, in one line
    transform: Callable[[RunSetup, float | None], RunSetup]  # the bug itself
    severity: Severity | None  # None: the fault has no natural degree

    @property
    def source_hash(self) -> str:
        """Hash of the transform's code; part of the cache key of runs it affects."""
        return hashlib.sha256(inspect.getsource(self.transform).encode()).hexdigest()[:12]


#: The registered faults, by name.
FAULTS: Registry[Fault] = Registry(
    "fault", group="faultbench.faults", adapt=lambda name, obj: _plugin_fault(name, obj)
)


def _plugin_fault(name: str, obj: object) -> Fault:
    """A plug-in's fault: a :class:`Fault` registered under its entry point's name."""
    if not isinstance(obj, Fault):
        raise TypeError(f"expected a faultbench Fault; got {type(obj).__name__}")
    if obj.name != name:
        raise TypeError(f"the entry point is named '{name}' but its Fault is '{obj.name}'")
    return obj


def fault(
    name: str, summary: str, severity: Severity | None = None
) -> Callable[[Callable[[RunSetup, float | None], RunSetup]], Fault]:
    """Register the decorated transform as a fault."""

    def decorate(transform: Callable[[RunSetup, float | None], RunSetup]) -> Fault:
        return FAULTS.add(name, Fault(name, summary, transform, severity))

    return decorate


@fault(
    "missing_zero_grad",
    "the loop never clears gradients, so they accumulate across steps",
)
def _missing_zero_grad(setup: RunSetup, severity: float | None) -> RunSetup:
    return setup.replace(zero_grad=False)


@fault(
    "huge_inputs",
    "inputs reach the model un-normalized, scaled far up",
    Severity(1000.0, 2.0, 1e6, "factor multiplying the inputs"),
)
def _huge_inputs(setup: RunSetup, severity: float | None) -> RunSetup:
    scale = np.float32(severity)
    return setup.replace(X_train=setup.X_train * scale, X_val=setup.X_val * scale)


@fault(
    "lr_too_high",
    "the learning rate is far above the task's working rate",
    Severity(100.0, 2.0, 1e4, "factor multiplying the working learning rate"),
)
def _lr_too_high(setup: RunSetup, severity: float | None) -> RunSetup:
    return setup.replace(lr=setup.lr * float(severity or 1.0))


@fault(
    "dead_units",
    "hidden ReLU units are dead from initialization (biases below any input)",
    Severity(0.9, 0.05, 1.0, "share of hidden units killed"),
)
def _dead_units(setup: RunSetup, severity: float | None) -> RunSetup:
    return setup.replace(dead_fraction=float(severity or 0.0))


@fault(
    "starved_loader",
    "the data pipeline is the bottleneck: each batch makes the step wait",
    Severity(0.002, 1e-4, 0.02, "seconds spent producing each batch"),
)
def _starved_loader(setup: RunSetup, severity: float | None) -> RunSetup:
    return setup.replace(batch_delay=float(severity or 0.0))


@fault(
    "too_small_model",
    "the hidden layer is far too narrow for the task",
    Severity(
        2.0, 1.0, 8.0, "width of the hidden layer (smaller is worse)", worse_when_higher=False
    ),
)
def _too_small_model(setup: RunSetup, severity: float | None) -> RunSetup:
    return setup.replace(hidden=int(severity or 1))


@fault(
    "label_mismatch",
    "training labels use a class mapping shifted against the validation mapping",
)
def _label_mismatch(setup: RunSetup, severity: float | None) -> RunSetup:
    # A cyclic shift is a permutation with no fixed point for any class count >= 2.
    shifted = (setup.y_train + 1) % setup.n_classes
    return setup.replace(y_train=shifted.astype(np.int64))


@fault(
    "softmax_before_loss",
    "the model outputs probabilities into a loss that expects logits",
)
def _softmax_before_loss(setup: RunSetup, severity: float | None) -> RunSetup:
    return setup.replace(softmax_head=True)


@fault(
    "frozen_layer",
    "the hidden layer is left out of the optimizer: it gets gradients, never changes",
)
def _frozen_layer(setup: RunSetup, severity: float | None) -> RunSetup:
    return setup.replace(frozen_layers=(*setup.frozen_layers, "hidden"))


@dataclass(frozen=True)
class Condition:
    """What is broken in a run: zero (healthy), one or several faults."""

    faults: tuple[tuple[str, float | None], ...] = ()  # (fault name, severity) in order

    @property
    def name(self) -> str:
        """``healthy``, a fault name, or fault names joined by ``+``."""
        return "+".join(name for name, _ in self.faults) or HEALTHY

    @property
    def labels(self) -> frozenset[str]:
        """The set of labels a perfect diagnoser would answer."""
        return frozenset(name for name, _ in self.faults) or frozenset({HEALTHY})

    def apply(self, setup: RunSetup) -> RunSetup:
        """Apply every fault, in order."""
        for name, severity in self.faults:
            setup = FAULTS.get(name).transform(setup, severity)
        return setup

    def source_hash(self) -> str:
        """Hash of the code of every fault involved."""
        return "-".join(FAULTS.get(name).source_hash for name, _ in self.faults)


def condition(*faults: str | tuple[str, float | None]) -> Condition:
    """Build a validated condition from names (canonical severity) or (name, severity).

    ``condition()`` and ``condition("healthy")`` are the healthy condition.

    Raises:
        FaultbenchError: an unknown fault name or a severity out of range.
    """
    pairs: list[tuple[str, float | None]] = []
    for item in faults:
        name, value = (item, None) if isinstance(item, str) else item
        if name == HEALTHY:
            continue
        spec = FAULTS.get(name)
        if spec.severity is None:
            pairs.append((name, None))
        else:
            pairs.append(
                (
                    name,
                    spec.severity.check(name, spec.severity.canonical if value is None else value),
                )
            )
    if len({n for n, _ in pairs}) != len(pairs):
        raise FaultbenchError(f"a condition names the same fault twice: {[n for n, _ in pairs]}")
    return Condition(tuple(pairs))


def condition_names() -> list[str]:
    """The ten canonical labels: ``healthy`` then every registered fault."""
    return [HEALTHY, *FAULTS.names()]


def canonical_conditions(
    names: Sequence[str] | None = None, *, task: Task | None = None
) -> list[Condition]:
    """One condition per label, each fault at its canonical severity.

    With ``task``, faults the task declares inapplicable are left out (the
    report lists them with the reason, so nothing is skipped silently).
    """
    skip = task.inapplicable if task is not None else {}
    return [condition(name) for name in (names or condition_names()) if name not in skip]
