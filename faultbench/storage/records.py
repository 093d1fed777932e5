"""Run specs and run records, and their JSON form.

A record is what one training attempt produced, with the spec it answers.
JSON has no NaN or infinity, and a diverged run is full of them, so
non-finite floats are written as ``{"$float": "nan"}`` and read back exactly;
a mapping that itself uses a ``$``-key is escaped as ``{"$dict": [[k, v], ...]}``
so that no user data can be mistaken for an encoded float.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from faultbench.core.codetext import code_text
from faultbench.faults.fault import Condition
from faultbench.tasks.design import Design
from faultbench.training.instruments import InstrumentRef
from faultbench.training.trace import RunConfig, Trace

SCHEMA = 3  # bump when the record layout changes; older records are re-run
STATUSES = ("ok", "failed")  # what an attempt can end as
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class BrokenRecord(ValueError):
    """A stored record that cannot be used: truncated, corrupted, foreign or old."""


@dataclass(frozen=True)
class RunSpec:
    """One cell of the grid: which task, which condition, which seed."""

    task: str  # task name
    task_fingerprint: str  # hash of the task's arrays and defaults
    condition: Condition  # what is broken
    seed: int  # the run's seed
    design: Design | None = None  # the base recipe the faults wrap; None: the task's reference
    instruments: tuple[InstrumentRef, ...] = ()  # attached to the loop as it trained; sorted
    # The hash of the code that trains it when that is not faultbench's recipe and loop (a
    # real-bug case's script and its recording, as code_text); "" for a grid run.
    code: str = ""

    @property
    def folder(self) -> str:
        """The seed's folder name: ``seed-3``, or ``seed-3.<design digest>`` for another base;
        an instrumented run's ends in ``+<instrument>`` for each (never a plain run's folder)."""
        base = (
            f"seed-{self.seed}" if self.design is None else f"seed-{self.seed}.{self.design.digest}"
        )
        return base + "".join(f"+{ref.name}" for ref in self.instruments)

    def with_instruments(self, refs: tuple[InstrumentRef, ...]) -> RunSpec:
        """The same run with ``refs`` attached to its loop (a different record)."""
        return replace(self, instruments=tuple(sorted(set(refs))))

    @property
    def slug(self) -> str:
        """A path-safe name of the condition with its severities."""
        parts = [name if sev is None else f"{name}@{sev:g}" for name, sev in self.condition.faults]
        return "+".join(parts) or "healthy"

    def key(self) -> str:
        """The cache key: spec plus the version of every piece of code it runs.

        The one key of every suite's runs: a grid run's code is :func:`code_version` and
        its faults' code; a run trained by code of its own (a real-bug case) brings that
        code's hash (:attr:`code`). Both hash code as :func:`code_text` reads it, so a
        docstring or comment edit keeps every key.
        """
        payload = {
            "task": self.task,
            "task_fingerprint": self.task_fingerprint,
            "condition": [list(pair) for pair in self.condition.faults],
            "seed": self.seed,
            "design": self.design.to_dict() if self.design else None,
            "code": self.code or code_version(),
        }
        if not self.code:  # every involved fault's variants' code
            payload["faults"] = _faults_hash(self.condition)
        if self.instruments:  # absent from a plain run's payload: its key is unchanged
            payload["instruments"] = [[ref.name, ref.code] for ref in self.instruments]
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {
            "task": self.task,
            "task_fingerprint": self.task_fingerprint,
            "condition": [list(pair) for pair in self.condition.faults],
            "seed": self.seed,
            "design": self.design.to_dict() if self.design else None,
        }
        if self.instruments:
            out["instruments"] = [[ref.name, ref.code] for ref in self.instruments]
        if self.code:
            out["code"] = self.code
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Inverse of :meth:`to_dict`."""
        faults = tuple((str(n), None if s is None else float(s)) for n, s in data["condition"])
        design = Design.from_dict(data["design"]) if data.get("design") else None
        refs = tuple(InstrumentRef(str(n), str(c)) for n, c in data.get("instruments", ()))
        return cls(
            data["task"],
            data["task_fingerprint"],
            Condition(faults),
            int(data["seed"]),
            design,
            refs,
            str(data.get("code", "")),
        )


@cache
def _faults_hash(condition: Condition) -> str:
    """``condition.source_hash()``, once per condition: it reads the faults' source, and a
    grid asks for the same conditions on every task and seed."""
    return condition.source_hash()


@cache
def code_version() -> str:
    """Hash of the code every run goes through: the healthy recipe and its models, how
    faults are applied, the loop, the monitor and its parts, the trace, and the CPU
    kernels it pins (:mod:`faultbench.core.kernels`).

    A fault's own code is keyed apart, per fault (:meth:`Condition.source_hash`).
    The modules are hashed as code (:func:`~faultbench.core.codetext.code_text`): an edit
    to a docstring or a comment keeps every key.
    """
    from faultbench.core import kernels
    from faultbench.faults import architectures, fault, recipe, source, tokens, transformer
    from faultbench.tasks import sequences
    from faultbench.training import (
        activations,
        attention,
        hooks,
        hostlog,
        layers,
        loop,
        model,
        monitor,
        trace,
        widths,
    )

    digest = hashlib.sha256()
    modules = (recipe, architectures, fault, source, loop, model, monitor, layers, activations)
    sequence_parts = (tokens, transformer, sequences, attention)  # a sequence task's run's
    for module in (*modules, widths, hostlog, hooks, trace, kernels, *sequence_parts):
        digest.update(code_text(inspect.getsource(module)).encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True, eq=False)
class RunRecord:
    """One training attempt: its spec, and its trace or the reason it failed."""

    spec: RunSpec  # what was run
    key: str  # the cache key it is stored under
    attempt: str  # unique id of this attempt; a rerun gets a new one
    status: str  # "ok" or "failed"
    seconds: float  # training wall time
    trace: Trace | None = None  # None when the attempt failed
    config: RunConfig | None = None  # None when the attempt failed
    error: str = ""  # why it failed
    code_version: str = ""  # code_version() when it ran
    created: str = ""  # UTC time it was written
    host: str = ""  # machine that trained it
    instruments: dict[str, Any] = field(default_factory=dict)  # instrument name -> its record

    @property
    def ok(self) -> bool:
        """Whether the run trained to the end."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, schema version first."""
        return {
            "schema": SCHEMA,
            "kind": "faultbench.scoring.run",
            "key": self.key,
            "attempt": self.attempt,
            "status": self.status,
            "spec": self.spec.to_dict(),
            "seconds": self.seconds,
            "config": self.config.to_dict() if self.config else None,
            "trace": self.trace.to_dict() if self.trace else None,
            "error": self.error,
            "code_version": self.code_version,
            "created": self.created,
            "host": self.host,
            **({"instruments": self.instruments} if self.instruments else {}),
        }

    @classmethod
    def from_dict(cls, data: Any) -> RunRecord:
        """Inverse of :meth:`to_dict`.

        Raises:
            BrokenRecord: ``data`` is not a record of the current schema, or a
                field is missing or malformed.
        """
        if not isinstance(data, dict) or data.get("kind") != "faultbench.scoring.run":
            raise BrokenRecord("not a faultbench run record")
        if data.get("schema") != SCHEMA:
            raise BrokenRecord(f"stored in schema {data.get('schema')!r}, expected {SCHEMA}")
        try:
            record = cls._parse(data)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # Any of these means a field was hand-edited or cut short.
            raise BrokenRecord(f"malformed field: {type(exc).__name__}: {exc}") from None
        if record.status not in STATUSES:
            raise BrokenRecord(f"status {record.status!r}, expected one of {STATUSES}")
        if record.ok and (record.trace is None or record.config is None):
            raise BrokenRecord("status 'ok' but no trace or config")
        return record

    @classmethod
    def _parse(cls, data: dict[str, Any]) -> RunRecord:
        return cls(
            spec=RunSpec.from_dict(data["spec"]),
            key=str(data["key"]),
            attempt=str(data["attempt"]),
            status=str(data["status"]),
            seconds=float(data["seconds"]),
            trace=Trace.from_dict(data["trace"]) if data["trace"] else None,
            config=RunConfig.from_dict(data["config"]) if data["config"] else None,
            error=data.get("error", ""),
            code_version=data.get("code_version", ""),
            created=data.get("created", ""),
            host=data.get("host", ""),
            instruments=dict(data.get("instruments", {})),
        )


def dumps(obj: Any) -> str:
    """Strict JSON text: non-finite floats encoded, never bare ``NaN``/``Infinity``.

    Dict keys become strings and tuples become lists, as in :mod:`json`.
    """
    return json.dumps(_encode(obj), allow_nan=False, separators=(",", ":"))


def loads(text: str | bytes) -> Any:
    """Inverse of :func:`dumps`; rejects bare ``NaN``/``Infinity`` (never written by us).

    Raises:
        ValueError: ``text`` is not strict JSON.
    """
    return json.loads(text, object_hook=_decode_object, parse_constant=_reject_constant)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not valid JSON")


def _encode(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"$float": "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")}
    if isinstance(obj, dict):
        items = {str(k): _encode(v) for k, v in obj.items()}
        if any(k.startswith("$") for k in items):
            return {"$dict": [[k, v] for k, v in items.items()]}
        return items
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    return obj


def _decode_object(obj: dict[str, Any]) -> Any:
    if len(obj) != 1:
        return obj
    tag = obj.get("$float")
    if isinstance(tag, str) and tag in _NONFINITE:
        return _NONFINITE[tag]
    pairs = obj.get("$dict")
    if isinstance(pairs, list):
        try:
            return {str(k): v for k, v in pairs}
        except (TypeError, ValueError):
            raise ValueError("malformed '$dict' entry") from None
    return obj
