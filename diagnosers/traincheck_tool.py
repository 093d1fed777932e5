"""``traincheck``: TrainCheck (Jiang et al., OSDI'25; ``traincheck`` 0.2.0) in the run's loop.

TrainCheck instruments a training program, infers invariants from healthy
reference runs, and checks a new run's trace against them: "an invariant is
violated, here", not a fault's name. Here it runs as TrainCheck runs a user's
script, inside the benchmark's own loop (:class:`TrainCheckInstrument`):

- **Collecting.** TrainCheck wraps every function of torch in place
  (``traincheck.instrumentor.tracer.Instrumentor(torch)``, as its
  ``traincheck-collect`` does at ``import torch``), for good: the instrument
  declares ``own_process``, so each run trains in a process of its own (forked
  for the run), where the instrument is built before the model. The loop's
  steps are announced with TrainCheck's own ``start_step()`` (what
  ``traincheck-collect`` inserts at the top of a training loop's body), under
  TrainCheck's checking policy (every step of the first ``WARM_UP``, then every
  ``INTERVAL``-th; ``config.DEFAULT_CHECKING_POLICY``). The model's parameters
  are read after each traced update by TrainCheck's ``VarSampler`` (its
  ``sampler`` model tracker), never changed: TrainCheck's ``proxy`` and
  ``subclass`` trackers replace the model's parameters with wrapped tensors
  and must be installed before the optimizer is built, which an instrument may
  not do (it would change the run, and the optimizer would step the old ones).
- **Inferring.** The invariants are TrainCheck's, inferred by its own engine
  (``traincheck.infer_engine.InferEngine``, every relation of its pool) from
  the traces of healthy digits runs on seeds no grid scores
  (:data:`INFER_SEEDS`, the reference recipe and drawn bases), so ``tuned_on``
  is digits. They ship as ``traincheck_invariants.json`` beside this module;
  ``python -c "from faultbench.diagnosers.traincheck_tool import infer; infer()"``
  infers them again (a few minutes).
- **Checking.** At the end of each run the instrument checks its trace
  against those invariants with TrainCheck's checker
  (``traincheck.checker.check_engine``) and keeps the violated ones (relation,
  description, first step) in the run's record.

The diagnoser answers ``other_fault`` ("broken, not one of the nine I can
name") when an invariant is violated and ``healthy`` otherwise, unless every
violated invariant maps to one known fault by :data:`MAPPING` (documented
in docs and README), which then names it.

What TrainCheck cannot see here, and why: its analysis skips every method of
``torch.nn.Module`` (``config.ANALYSIS_SKIP_FUNC_NAMES``), so the loop's
``model.zero_grad()`` (the benchmark clears the model's gradients, so layers
left out of the optimizer are cleared too) is invisible to its invariants;
and without the proxy tracker it infers no invariant on how an update
changes a parameter, which is how it would see a frozen layer.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from faultbench.diagnosers import _tools
from faultbench.diagnosers._tools import OTHER_FAULT
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Run
from faultbench.training.instruments import INSTRUMENTS, Instrument

NAME = "traincheck"
INSTRUMENT = "traincheck"
WARM_UP = 10  # TrainCheck's checking policy: every step of the first ten, ...
INTERVAL = 10  # ... then every tenth (traincheck.config.config.DEFAULT_CHECKING_POLICY)
BACKEND = "pandas"  # TrainCheck's default trace implementation for inference and checking
INVARIANTS_FILE = Path(__file__).resolve().with_name("traincheck_invariants.json")
INFER_TASK = "digits"
INFER_SEEDS = (1000, 1001, 1002, 1003, 1004)  # the calibration seeds: no grid scores them
FLUSH_WAIT = 5.0  # seconds to wait for TrainCheck's writer threads to close their files


def _invariants_digest() -> str:
    try:
        return hashlib.sha256(INVARIANTS_FILE.read_bytes()).hexdigest()[:12]
    except OSError:
        return "absent"


#: The shipped invariants' hash: the instrument's records (which hold the check) follow it.
INVARIANTS_DIGEST = _invariants_digest()

#: Violated invariants that name a known fault: (relation, words its description holds) ->
#: label. A run is named only when every violated invariant maps to the same label; any
#: other violation is ``other_fault``. Empty, from digits (classic grid, seed 0): only two
#: runs violated anything, and what they violated is the run's structure, not a fault's
#: mark. dead_units' 17 are calls at step 0 (the fault's initialization runs a forward pass
#: under no_grad: ReLU.forward before any Adam.step, outputs that require no grad);
#: too_small_model's 2 are a layer's output shape ((32, 64) in every reference run). A
#: drawn base's own widths and initialization change the same invariants, so mapping them
#: to dead_units or too_small_model would name those faults on healthy drawn runs.
MAPPING: dict[tuple[str, str], str] = {}


@INSTRUMENTS.register(INSTRUMENT)
class TrainCheckInstrument(Instrument):
    """TrainCheck's API and parameter trace of the run's loop, checked against the shipped
    invariants when the run ends (see the module's docstring)."""

    name = INSTRUMENT
    libraries = ("traincheck",)
    own_process = True  # TrainCheck wraps torch for good

    def __init__(self, *, collect_to: str | None = None) -> None:
        _tools.require("traincheck", diagnoser=NAME)
        from traincheck.instrumentor.tracer import Instrumentor

        self.invariants = INVARIANTS_DIGEST  # keys the records to the invariants checked
        self._collect = collect_to is not None
        self._dir = collect_to or tempfile.mkdtemp(prefix="faultbench-traincheck-")
        os.makedirs(self._dir, exist_ok=True)
        os.environ["TRAINCHECK_OUTPUT_DIR"] = self._dir
        self._sampler: Any = None
        self._error = ""
        start = time.perf_counter()
        with _tools.quiet():
            self._wrapped = Instrumentor(
                torch,
                scan_proxy_in_args=False,
                use_full_instr=False,
                sampling_interval=INTERVAL,
                warm_up_steps=WARM_UP,
            ).instrument()
        self._instrument_seconds = time.perf_counter() - start

    def start(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> None:
        """Track the model's parameters (read only) and announce the first step."""
        from traincheck.instrumentor.control import start_step
        from traincheck.instrumentor.tracer import VarSampler

        with _tools.quiet():
            self._sampler = VarSampler(model, "model")
            start_step()

    def after_step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: tuple[torch.Tensor, torch.Tensor],
        loss: torch.Tensor,
        step: int,
    ) -> None:
        """Sample the parameters after a traced update (TrainCheck's sampler hooks the
        optimizer's step; here the loop calls it), then announce the next step."""
        from traincheck.config import config
        from traincheck.instrumentor.control import start_step

        with _tools.quiet():
            if not config.DISABLE_WRAPPER:
                self._sampler.dump_sample()
            start_step()

    def finish(self) -> dict[str, Any]:
        """Close the trace; check it (unless collecting for inference)."""
        files = _close_trace(self._dir)
        record: dict[str, Any] = {
            "policy": {"warm_up": WARM_UP, "interval": INTERVAL},
            "wrapped_functions": int(self._wrapped),
            "trace_lines": {Path(f).name.split("_")[1]: _lines(f) for f in files},
            "invariants_digest": self.invariants,
        }
        if self._collect:
            return {**record, "collected": self._dir}
        try:
            return {**record, **check(files)}
        except Exception as exc:  # TrainCheck's failure is recorded, never the run's
            return {**record, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            _remove(self._dir)


def _close_trace(folder: str) -> list[str]:
    """Flush TrainCheck's buffers and stop its writer threads, so every trace line is on
    disk (its threads write them, and close them only when told to stop); then give every
    line the same process and thread id (see :func:`_same_ids`). The trace files."""
    from traincheck.instrumentor import dumper

    for name in ("api_trace_buffer", "var_trace_buffer"):
        buffer = getattr(dumper.THREAD_DATA, name, None)
        if buffer is not None:
            buffer._flush()
            buffer.queue.join()
    dumper.stop_event.set()
    deadline = time.monotonic() + FLUSH_WAIT
    for thread in threading.enumerate():  # the writers (not the thread that waits for main)
        if getattr(thread, "_target", None) is dumper.trace_dumper:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
    files = sorted(str(p) for p in Path(folder).glob("trace_*.log"))
    for path in files:
        _same_ids(path)
    return files


_IDS = re.compile(rb'"(process_id|thread_id)":\s*\d+')


def _same_ids(path: str) -> None:
    """Rewrite a trace file with process and thread ids 0 on every line.

    A run is one process and one thread, so the ids name nothing but the machine's
    process table. TrainCheck 0.2.0 nevertheless infers preconditions on them
    (``process_id``, ``thread_id`` are in ``config.NOT_USE_AS_CLAUSE_FIELDS``, but
    its precondition search keeps them): inferred on six traces from six processes,
    179 of its 2249 invariants held "unless the process id is 8027", and every
    later run, in a process of another id, violated them. The same ids in every
    trace keep TrainCheck's inference on what the runs did.
    """
    # As text: a trace line may hold integers beyond 64 bits, which a JSON round trip
    # through orjson (TrainCheck's) would turn into floats.
    text = Path(path).read_bytes()
    text = _IDS.sub(rb'"\1": 0', text)
    Path(path).write_bytes(text)


def _lines(path: str) -> int:
    with open(path, "rb") as fh:
        return sum(1 for _ in fh)


def _remove(folder: str) -> None:
    for path in Path(folder).glob("*"):
        path.unlink(missing_ok=True)
    Path(folder).rmdir()


def check(files: Sequence[str], invariants: Path | None = None) -> dict[str, Any]:
    """TrainCheck's checker on one run's trace files against ``invariants`` (the shipped
    ones by default): the violated invariants (relation, description, first step of the
    violating example) and how many were checked."""
    from traincheck.checker import check_engine
    from traincheck.invariant import read_inv_file
    from traincheck.trace import select_trace_implementation

    invariants = invariants or INVARIANTS_FILE
    if not invariants.exists():
        return {"error": f"no invariants at {invariants.name}; infer them first", "violated": []}
    with _tools.quiet():
        invs = read_inv_file([str(invariants)])
        _, read = select_trace_implementation(BACKEND)
        results = check_engine(read(list(files)), invs, False)
    violated = [
        {
            "relation": r.invariant.relation.__name__,
            "text": r.invariant.text_description,
            "first_step": _first_step(r.trace),
        }
        for r in results
        if not r.check_passed
    ]
    return {
        "checked": len(results),
        "not_triggered": sum(1 for r in results if r.triggered is False),
        "violated": violated,
        "error": "",
    }


def _first_step(rows: Any) -> int | None:
    steps = []
    for row in rows or ():
        meta = row.get("meta_vars") if isinstance(row, dict) else None
        value = meta.get("step") if isinstance(meta, dict) else None
        value = row.get("meta_vars.step", value) if isinstance(row, dict) else value
        if isinstance(value, (int, float)) and value == value:
            steps.append(int(value))
    return min(steps) if steps else None


def label_for(violated: Sequence[dict[str, Any]]) -> str:
    """The answer for a run's violated invariants (see :data:`MAPPING`)."""
    if not violated:
        return "healthy"
    named = set()
    for v in violated:
        hits = {
            label
            for (relation, words), label in MAPPING.items()
            if v["relation"] == relation and words in v["text"]
        }
        named.add(hits.pop() if len(hits) == 1 else OTHER_FAULT)
    return named.pop() if len(named) == 1 else OTHER_FAULT


@DIAGNOSERS.register(NAME)
class TrainCheckDiagnoser:
    """TrainCheck's invariants, inferred on healthy digits runs, checked in each run's loop."""

    name = NAME
    instrument = INSTRUMENT  # trained with TrainCheck in the loop, each run in its own process
    probes = False  # reads TrainCheck's check of the run
    tuned_on: frozenset[str] = frozenset({INFER_TASK})
    subset_seeds = 1  # each run is traced again and checked: seed 0 of the classic grid,
    subset_full_grid = "healthy"  # 5 healthy drawn runs per task, and the real-bug suite
    # TrainCheck traces every torch call of a run in an interpreter of its own: 30 to 135 s
    # a run on 2 cores, so its 895 runs of seed 0 of both grids took about 8.5 hours, which
    # no session held. This subset (about 350 runs) is about what 2 cores trace in 2 hours.
    # It is scored on demand (--diagnoser traincheck).
    left_out_of_report = "30-80 s a run (each traced in its own interpreter): scored on demand"

    def __init__(self) -> None:
        _tools.require("traincheck", diagnoser=NAME)

    def diagnose(self, run: Run) -> Diagnosis:
        """``other_fault`` when an invariant is violated, healthy when none is."""
        seen = run.instruments.get(INSTRUMENT)
        if seen is None:
            why = "the run trained without the instrument"
            return _tools.answer("unknown", "no traincheck record", {"why": why})
        if seen.get("error"):
            return _tools.answer("unknown", "traincheck failed", {"why": seen["error"]})
        violated = seen.get("violated", [])
        evidence = {
            "violated": violated[:20],
            "violations": len(violated),
            "checked": seen.get("checked"),
            "not_triggered": seen.get("not_triggered"),
        }
        decided = "invariant violated" if violated else "none violated"
        # Not _tools.answer: its answerable() still turns other_fault into unknown (written
        # before the faults knew the label); TrainCheck's "broken" is other_fault.
        return Diagnosis(
            label_for(violated), evidence=_tools.clean({"decided_by": decided, **evidence})
        )


def infer(out: Path = INVARIANTS_FILE, *, seeds: Sequence[int] = INFER_SEEDS) -> int:
    """Infer the invariants again from healthy ``INFER_TASK`` runs on ``seeds`` (each seed's
    verified drawn base, and the reference recipe on the first), traced in the benchmark's
    loop as every checked run is; write them to ``out``. Returns how many."""
    from traincheck.infer_engine import InferEngine, save_invs
    from traincheck.trace import select_trace_implementation

    from faultbench.faults.fault import Condition
    from faultbench.storage.bases import verified_bases
    from faultbench.storage.records import RunSpec
    from faultbench.storage.runner import make_job, train_result
    from faultbench.storage.store import Store
    from faultbench.tasks.task import get_task
    from faultbench.training.instruments import reference

    task = get_task(INFER_TASK)
    with tempfile.TemporaryDirectory(prefix="faultbench-traincheck-infer-") as root:
        bases = verified_bases(task, list(seeds), store=Store(Path(root) / "store"))
        healthy = [RunSpec(task.name, task.fingerprint, Condition(), seeds[0])] + [
            RunSpec(task.name, task.fingerprint, Condition(), b.seed, b.design)
            for b in bases.values()
        ]
        folders = []
        for i, spec in enumerate(healthy):
            folder = str(Path(root) / f"trace-{i}")
            collect = functools.partial(TrainCheckInstrument, collect_to=folder)
            spec = spec.with_instruments((reference(INSTRUMENT),))
            train_result(make_job(spec, instruments=(collect,)))
            folders.append(folder)
            print(f"traced healthy run {i + 1}/{len(healthy)}", file=sys.stderr)
        _, read = select_trace_implementation(BACKEND)
        traces = [read(sorted(str(p) for p in Path(f).glob("trace_*.log"))) for f in folders]
        with _tools.quiet():
            invs, _ = InferEngine(traces).infer_multi_trace()
        save_invs(sorted(invs, key=lambda x: x.text_description), str(out))
    return len(invs)
