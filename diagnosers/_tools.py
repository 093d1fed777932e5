"""What the three tool adapters share: importing an extra, a quiet call, the replayed loop.

The tools (torch-lr-finder, weightwatcher, cockpit-for-pytorch) come with the
``tools`` extra. Each adapter imports its tool when it is built, so a missing
extra is one line when the diagnoser is chosen, not a crash in the middle of
a benchmark.

The *replay* is the monitored loop run again through the run's probe: the
model as the run initialized it, the run's loss and training data, and the
observable configuration (optimizer class, learning rate, batch size, steps),
with the run's seed for the batch order. It reproduces every fault that lives
in the model or the data (huge_inputs, dead_units, too_small_model,
label_mismatch, softmax_before_loss) and the learning rate (lr_too_high); it
cannot reproduce a bug in the loop's code, which the probe does not carry: a
replay of a missing_zero_grad, frozen_layer or starved_loader run trains as a
healthy run would. docs/tools.md says so beside each adapter.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from torch import nn

from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import condition_names
from faultbench.faults.recipe import BatchStream
from faultbench.scoring.diagnosis import UNKNOWN, Diagnosis, finite_or_none
from faultbench.scoring.run import Run
from faultbench.storage.runner import (
    one_thread,  # as the runner trains: a replay costs what the run did
)

INSTALL = "pip install 'faultbench[tools]'"  # the one command that brings all three tools
OTHER_FAULT = "other_fault"  # "something is broken, and it is none of the nine"


@dataclass(frozen=True)
class Symptom:
    """One thing a tool reports, and the label an adapter answers for it."""

    name: str  # the symptom's key in the adapter's evidence
    label: str  # the faultbench label it maps to
    reads: str  # what the tool measured and the threshold, in a few words
    source: str  # where the threshold comes from ("tuned on digits", "published")


def symptom_table(symptoms: tuple[Symptom, ...]) -> str:
    """The adapter's symptom-to-label table as markdown (docs/tools.md shows it)."""
    rows = ["| symptom | label | what the tool measured | threshold from |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | `{s.label}` | {s.reads} | {s.source} |" for s in symptoms]
    return "\n".join(rows)


def require(module: str, *, diagnoser: str) -> ModuleType:
    """Import a tool's module, or say in one line how to install it.

    Raises:
        FaultbenchError: the module does not import (the extra is not installed,
            or, for cockpit, setuptools is too new to ship ``pkg_resources``).
    """
    try:
        with quiet():  # weightwatcher prints notes and cockpit warns while importing
            return importlib.import_module(module)
    except ImportError as exc:
        raise FaultbenchError(
            f"diagnoser '{diagnoser}' is unavailable: {INSTALL} "
            f"(module '{module}' does not import: {exc})"
        ) from None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Swallow what a tool prints and warns (progress bars, notes, deprecations)."""
    sink = io.StringIO()
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(sink),
        contextlib.redirect_stderr(sink),
    ):
        warnings.simplefilter("ignore")
        yield


def answerable(label: str) -> str:
    """``label`` if the harness accepts it, else ``unknown``.

    ``other_fault`` is a label only once the faults know it (issue 18); until
    then an adapter that means "broken, but none of the nine" abstains.
    """
    return label if label in {*condition_names(), UNKNOWN} else UNKNOWN


def answer(label: str, decided_by: str, evidence: dict[str, Any]) -> Diagnosis:
    """A Diagnosis with JSON-clean evidence and the symptom that decided it."""
    return Diagnosis(
        answerable(label), confidence=None, evidence={"decided_by": decided_by, **clean(evidence)}
    )


def clean(value: Any) -> Any:
    """Evidence for JSON reports: non-finite floats become None, tuples lists."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, float):
        return finite_or_none(value)
    return value


def needs_probe(run: Run, name: str) -> None:
    """Raise when the run has no probe: these adapters run the tool on a rebuilt model."""
    if run.probe is None:
        raise FaultbenchError(f"diagnoser '{name}' needs the run's probe; this run has none")


# A step of the replay: (step, model, optimizer, output, target, loss) -> None.
# It must call loss.backward(); cockpit wraps that call in its context.
Backward = Callable[[int, nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor, Any], None]


def _plain_backward(
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    output: torch.Tensor,
    target: torch.Tensor,
    loss: torch.Tensor,
) -> None:
    loss.backward()


@dataclass(frozen=True, eq=False)
class Replay:
    """What a replay of the monitored loop left."""

    model: nn.Module  # the final weights
    initial: nn.Module  # the weights the run started from
    losses: tuple[float, ...]  # each step's training loss


def optimizer_class(run: Run) -> Callable[..., torch.optim.Optimizer]:
    """The run's optimizer class by its recorded name (``Adam`` for every shipped task)."""
    found = getattr(torch.optim, run.config.optimizer, None)
    if not (isinstance(found, type) and issubclass(found, torch.optim.Optimizer)):
        raise FaultbenchError(
            f"the run's optimizer '{run.config.optimizer}' is not a torch.optim class"
        )
    return found


def replay(
    run: Run, *, model: nn.Module | None = None, backward: Backward = _plain_backward
) -> Replay:
    """Train the run's model again as its loop did, every loss through ``run.probe.loss``.

    Args:
        run: The run; its probe supplies the model, loss and data, its config
            the optimizer, learning rate, batch size and steps.
        model: The model to train (a fresh ``probe.make_model()`` by default);
            cockpit passes one it has extended.
        backward: Does each step's backward pass.

    Returns:
        The final model, the initial one and the losses.
    """
    assert run.probe is not None
    probe = run.probe
    model = probe.make_model() if model is None else model
    initial = probe.make_model()
    optimizer = optimizer_class(run)(model.parameters(), lr=run.config.lr)
    X, y = probe.train_data()
    stream = iter(
        BatchStream(X.numpy(), y.numpy(), batch_size=run.config.batch_size, seed=run.seed)
    )
    losses: list[float] = []
    model.train()
    with one_thread():
        for step in range(1, run.config.steps + 1):
            xb, yb = next(stream)
            output = model(xb)
            loss = probe.loss(output, yb)
            optimizer.zero_grad()
            backward(step, model, optimizer, output, yb, loss)
            optimizer.step()
            losses.append(float(loss.detach()))
    return Replay(model, initial, tuple(losses))


def finite_weights(model: nn.Module) -> bool:
    """Whether every parameter is finite (a diverged replay leaves NaN weights)."""
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def ln_c(run: Run) -> float:
    """The loss of a uniform guess over the run's classes."""
    return math.log(max(2, run.config.n_classes))
