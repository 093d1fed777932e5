"""Instruments: code a diagnoser attaches to the benchmark's loop while a run trains.

A tool such as Cockpit or TrainCheck watches the training itself: the model,
the optimizer, each batch, the loss, the moment of each update. An instrument
is how such a tool rides along in :func:`faultbench.training.loop.train`. It
reads like a Lightning or Hugging Face callback: a small object with one
method per moment of the loop, keeping its own state::

    start(model, optimizer, loss_fn)                            before the first step
    after_backward(model, optimizer, batch, output, loss, step) gradients computed, not applied
    after_step(model, optimizer, batch, loss, step)             the update applied
    finish() -> dict                                            after the run; a plain record
    gave_up() -> bool                                           stopped watching for good

The loop calls them with plain calls, nothing else; ``finish``'s record is
stored with the run (so it must be JSON: mappings with string keys, lists,
strings, numbers, booleans, None; non-finite floats are fine) and reaches the
diagnoser as ``run.instruments[name]``.

**An instrument must not change the run.** It draws nothing from torch's
global generator (wrap any draw in ``torch.random.fork_rng``), changes no
parameter, gradient, buffer or optimizer state in place, and leaves no
gradient behind from a backward pass of its own (run one on a copy of the
model). The identity test (``tests/test_instruments.py``) trains every shipped
instrument's runs with and without it and compares the traces bit for bit.

Instruments are registered by name in :data:`INSTRUMENTS` (the shipped ones
live beside the diagnosers that read them, in ``faultbench.diagnosers``;
plug-ins come from the ``faultbench.instruments`` entry-point group, or from
``INSTRUMENTS.register`` in the module of a diagnoser that uses one). A name,
not a class on the diagnoser, because a run is stored and keyed by it: an
instrumented run's spec names its instruments with :class:`InstrumentRef`
(the name and a hash of the instrument's code and libraries), so a stored run
is found again from the spec alone, a change to the instrument retrains only
its own runs, and ``faultbench bench`` and the identity test can list every
instrument there is. A diagnoser asks for one with a class attribute,
``instrument = "cockpit"``.
"""

from __future__ import annotations

import hashlib
import inspect
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from traceback import format_exc
from typing import Any, TypeVar

import torch
from torch import nn

from faultbench.core.codetext import code_text
from faultbench.core.errors import FaultbenchError
from faultbench.core.registry import Registry
from faultbench.faults.source import code_hash

ENTRY_POINT_GROUP = "faultbench.instruments"
Batch = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Instrument:
    """Base class of an instrument: every moment is a no-op until overridden.

    Subclass it, set :attr:`name`, override the moments you need and return
    your record from :meth:`finish`. One object watches one run: the registry
    holds the class (or a factory), and each run builds a fresh one.
    """

    name: str = ""  # the registered name; the key of its record in ``run.instruments``
    #: Distributions whose versions key the instrument's runs (its tool's), beside its code.
    libraries: tuple[str, ...] = ()
    #: True for an instrument that patches libraries process-wide and cannot undo it
    #: (TrainCheck wraps every torch function): each of its runs trains in a fresh
    #: interpreter of its own, gone after it (:func:`in_own_process`), and the instrument is
    #: built there.
    own_process: bool = False

    def start(self, model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn) -> None:
        """Before the first step: the model as initialized, its optimizer and the loss."""

    def after_backward(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: Batch,
        output: torch.Tensor,
        loss: torch.Tensor,
        step: int,
    ) -> None:
        """After ``loss.backward()`` of update ``step`` (from 1): the gradients as the
        loop left them (cleared or not), the weights not yet updated."""

    def after_step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: Batch,
        loss: torch.Tensor,
        step: int,
    ) -> None:
        """After update ``step``: the optimizer has stepped, the schedule moved on."""

    def finish(self) -> dict[str, Any]:
        """After the run: what the instrument saw, as a JSON-ready mapping."""
        return {}

    def gave_up(self) -> bool:
        """Whether the instrument has stopped watching this run for good: from now on
        nothing the loop does changes what :meth:`finish` returns (a tool that cannot
        watch this model, as it finds at the first step).

        Override it in an instrument that can give up: the benchmark then tries a run's
        first step alone before training it with the instrument, and a run whose every
        instrument gave up there is not trained again: its record is the plain run's
        (an instrument never changes the run), with what the instruments recorded in
        that step (:func:`faultbench.storage.runner.ensure_records`).
        """
        return False


Factory = Callable[[], Instrument]


def _adapt(name: str, obj: object) -> Factory:
    if not callable(obj):
        raise TypeError(f"expected an Instrument class or factory; got {type(obj).__name__}")
    return obj  # type: ignore[return-value]


#: Shipped and plug-in instruments: name -> a class or zero-argument factory.
INSTRUMENTS: Registry[Factory] = Registry(
    "instrument", builtin="faultbench.diagnosers", group=ENTRY_POINT_GROUP, adapt=_adapt
)


@dataclass(frozen=True, order=True)
class InstrumentRef:
    """An instrument as a run spec names it: its name and a hash of what it runs."""

    name: str  # the registered name
    code: str  # hash of the instrument's code (its class and its module's helpers) and libraries

    @property
    def factory(self) -> Factory:
        """The registered factory, checked to be the code this reference was made from.

        Raises:
            FaultbenchError: no such instrument, or its code changed since.
        """
        found = INSTRUMENTS.get(self.name)
        now = instrument_code(found)
        if now != self.code:
            raise FaultbenchError(
                f"instrument '{self.name}' runs code {now}, but this run was keyed with "
                f"{self.code}; expected the same code in every process of one evaluation"
            )
        return found


def reference(name: str) -> InstrumentRef:
    """The reference to the registered instrument ``name``.

    Raises:
        FaultbenchError: unknown name (with the nearest one).
    """
    return InstrumentRef(name, instrument_code(INSTRUMENTS.get(name)))


def references(names: str | Sequence[str] | None) -> tuple[InstrumentRef, ...]:
    """References to the instruments a diagnoser names (one name, several, or none)."""
    if not names:
        return ()
    listed = [names] if isinstance(names, str) else list(names)
    return tuple(sorted({reference(name) for name in listed}))


@cache
def instrument_code(factory: Factory) -> str:
    """A short hash of ``factory``'s code (and of what its module gives it, see
    :func:`faultbench.faults.source.code_hash`), of this module's code (how records are
    checked) and of its libraries' versions. A plain run's key hashes none of it.

    Raises:
        FaultbenchError: the factory's source cannot be read (typed into an interpreter).
    """
    try:
        code = code_hash([factory])
    except (OSError, TypeError) as exc:
        raise FaultbenchError(
            f"instrument {getattr(factory, 'name', factory)!r}: its source cannot be read "
            f"({exc}); expected a class or function defined in a file, whose code keys its runs"
        ) from None
    digest = hashlib.sha256(code.encode())
    digest.update(code_text(inspect.getsource(sys.modules[__name__])).encode())
    for library in getattr(factory, "libraries", ()):
        try:
            version = metadata.version(library)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"\0{library}=={version}".encode())
    return digest.hexdigest()[:12]


def build(named: Sequence[tuple[str, Factory]]) -> list[Instrument]:
    """A fresh instrument from each (name, factory), for one run.

    Raises:
        FaultbenchError: a factory built an object of another name.
    """
    built = []
    for name, factory in named:
        instrument = factory()
        if getattr(instrument, "name", None) != name:
            raise FaultbenchError(
                f"instrument '{name}' built an object named "
                f"{getattr(instrument, 'name', None)!r}; expected its name to be '{name}'"
            )
        built.append(instrument)
    return built


def needs_own_process(factories: Sequence[Factory]) -> bool:
    """Whether any of these instruments must be built and run in a process of its own
    (its ``own_process``; a ``functools.partial`` of such a class counts as the class)."""
    return any(
        getattr(f, "own_process", getattr(getattr(f, "func", None), "own_process", False))
        for f in factories
    )


T = TypeVar("T")


def in_own_process(fn: Callable[[], T]) -> T:
    """``fn()`` in a fresh Python interpreter, started for it and gone after it.

    ``fn`` travels pickled (a module-level function, or a ``functools.partial`` of
    one, whose arguments pickle: a run's spec, not its recipe), and so does its
    result, through files: an instrument's tool may print on the child's stdout.
    A fresh interpreter rather than a fork: a tool that wraps torch traces the
    lazy first calls a process makes, and a fork would inherit whatever this
    process already did, so two runs of one spec would give two traces.

    Raises:
        FaultbenchError: ``fn`` raised in the child (its traceback is in the message), or
            the child died without an answer.
    """
    with tempfile.TemporaryDirectory(prefix="faultbench-own-") as folder:
        given, answer = Path(folder) / "in.pickle", Path(folder) / "out.pickle"
        given.write_bytes(pickle.dumps(fn))
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(given), str(answer)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )
        if not answer.exists():
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
            raise FaultbenchError(
                f"the process of an instrumented run exited with code {done.returncode} "
                f"without an answer; expected the run's result (stderr: {' | '.join(tail)})"
            )
        kind, value = pickle.loads(answer.read_bytes())
    if kind == "error":
        raise FaultbenchError(f"in the instrumented run's own process: {value}")
    return value  # type: ignore[no-any-return]


_CHILD = "from faultbench.training.instruments import _serve; _serve()"


def _serve() -> None:
    """The child of :func:`in_own_process`: run the pickled call, pickle what came of it."""
    given, answer = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        result: tuple[str, Any] = ("ok", pickle.loads(given.read_bytes())())
    except BaseException as exc:  # everything goes back to the parent
        result = ("error", f"{type(exc).__name__}: {exc}\n{format_exc()}")
    answer.write_bytes(pickle.dumps(result))


def finish_all(instruments: Sequence[Instrument]) -> dict[str, dict[str, Any]]:
    """Each instrument's record by name, checked to be JSON-ready.

    Raises:
        FaultbenchError: two instruments of one name, or a record that is not JSON.
    """
    out: dict[str, dict[str, Any]] = {}
    for instrument in instruments:
        if instrument.name in out:
            raise FaultbenchError(f"instrument '{instrument.name}' attached twice to one run")
        record = instrument.finish()
        if not isinstance(record, Mapping):
            raise FaultbenchError(
                f"instrument '{instrument.name}'.finish() returned {type(record).__name__}, "
                "expected a mapping (a plain JSON record)"
            )
        out[instrument.name] = {
            str(k): _json(v, f"{instrument.name}.{k}") for k, v in record.items()
        }
    return out


def _json(value: Any, where: str) -> Any:
    """``value`` as plain JSON (tuples become lists), or a FaultbenchError saying where not."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return float(value) if isinstance(value, float) else value  # numpy's float64 too
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise FaultbenchError(f"instrument record {where}: a mapping with a non-string key")
        return {k: _json(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise FaultbenchError(
        f"instrument record {where}: {type(value).__name__} is not JSON; expected mappings, "
        "lists, strings, numbers, booleans or None (a tensor: .tolist() or float())"
    )
