"""How fast the benchmark is: the five figures ``faultbench bench`` prints.

1. recording overhead: instrumented loop / bare loop, time per step, on three
   step sizes (the digits MLP, the shapes CNN, a small ResNet of 5-20 ms);
2. probe cost: ``rules`` diagnosis seconds / training seconds per run;
3. parallel efficiency of the local process pool on all cores;
4. cold wall time of the canonical benchmark, and warm rescoring time;
5. peak resident memory;
1d. what the doctor's early warnings add to a monitored loop, checked every
   :data:`~faultbench.tools.early.CHECK_EVERY` updates as the callbacks do;
6, 7, ...: what each registered instrument (:mod:`faultbench.training.instruments`,
   e.g. Cockpit attached live) adds to a step of the loop, on the same three step sizes.

Everything runs in one process on one machine, which is usually shared and
noisy, so timings are interleaved and summarized by medians, and ratios are
reported rather than absolute seconds alone.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from scipy.stats import binom

from faultbench.core.limits import DEFAULT_TIMEOUT
from faultbench.faults.fault import base_setup, canonical_conditions
from faultbench.storage.records import RunSpec
from faultbench.storage.runner import make_job, one_thread, train_record
from faultbench.storage.store import Store
from faultbench.tasks.task import get_task
from faultbench.tools.bigstep import small_resnet, train_resnet
from faultbench.tools.early import CHECK_EVERY
from faultbench.training.engine import LocalEngine
from faultbench.training.instruments import (
    INSTRUMENTS,
    Factory,
    Instrument,
    in_own_process,
    needs_own_process,
)
from faultbench.training.loop import EVALUATIONS, train
from faultbench.training.monitor import DEFAULT_EVERY, Monitor

BENCH_TASKS = ("digits", "synthetic")  # the canonical benchmark
PROBE_DIAGNOSER = "rules"  # the diagnoser whose probe cost is measured
WARM_DIAGNOSER = "always-healthy"  # passive: rescoring it must train nothing
COLD_GOAL = 60  # seconds for the cold canonical benchmark (5 seeds, 2 cores)


@dataclass(frozen=True)
class Figure:
    """One measured figure and how it compares with its goal."""

    name: str  # what was measured
    value: float | None  # the number; None when it could not be measured
    unit: str  # "x", "s", "MiB", ...
    goal: str  # the goal, e.g. "<= 1.10"; "" when there is none
    met: bool | None  # None when there is no goal or no value
    detail: str  # how it was measured, and companion numbers

    def line(self) -> str:
        """One printable line."""
        value = "n/a" if self.value is None else f"{self.value:.3f}{self.unit}"
        verdict = "" if self.met is None else (" (met)" if self.met else " (NOT met)")
        goal = f"  goal {self.goal}{verdict}" if self.goal else ""
        return f"{self.name}: {value}{goal}  [{self.detail}]"


WARM_HOLD = 1.0  # seconds each warm-up task holds its worker
WARM_STEPS = 30  # steps of the warm-up run each worker trains before timing


@dataclass(frozen=True)
class BenchConfig:
    """How much work each measurement does."""

    pairs: int  # interleaved bare/instrumented training rounds on digits
    cnn_pairs: int  # the same on shapes (a step a few times longer)
    run_steps: int | None  # steps of each of those runs (None: the task's own)
    big_pairs: int  # the same with the small ResNet
    big_steps: int  # steps of each small-ResNet run
    parallel_runs: int  # runs timed one at a time and all at once on one pool
    seeds: int  # seeds of the canonical grid timed cold and warm
    tasks: tuple[str, ...] = BENCH_TASKS  # the tasks of that grid
    own_process_rounds: int = 3  # rounds for an instrument timed in processes of its own
    # Steps of those rounds (None: as the other figures'): TrainCheck takes ~0.2 s a step
    # on digits and ~3 s on the small ResNet, so the quick preset shows the figure on a few.
    own_process_steps: int | None = None

    @classmethod
    def preset(cls, quick: bool) -> BenchConfig:
        """The full benchmark, or a quick one that only shows every figure."""
        if quick:
            return cls(
                pairs=2,
                cnn_pairs=1,
                run_steps=60,
                big_pairs=1,
                big_steps=10,
                parallel_runs=2,
                seeds=1,
                tasks=BENCH_TASKS[:1],
                own_process_rounds=1,
                own_process_steps=3,
            )
        return cls(
            pairs=50,
            cnn_pairs=20,
            run_steps=None,
            big_pairs=20,
            big_steps=300,  # so one-off costs (the Monitor, the trace) weigh as in real runs
            parallel_runs=32,
            seeds=5,
        )


def machine() -> str:
    """Cores available and CPU model, for quoting the figures."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    return f"{len(os.sched_getaffinity(0))} cores available, {model}, torch {torch.__version__}"


#: Goals for the instrumented / bare time per step, per step size.
OVERHEAD_GOALS = {"digits": 1.25, "shapes": 1.10}
BIG_STEP_GOAL = 1.03
OVERHEAD_LABELS = {"digits": ("1a", "digits MLP"), "shapes": ("1b", "shapes CNN")}


def _interleaved(
    loops: dict[str, Callable[[], object]], rounds: int, seed: int, *, threads_too: bool = False
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and thread CPU seconds of each loop, ``rounds`` times, interleaved on one thread
    (``threads_too``: the CPU seconds of every thread of the process, for an instrument
    that may work in threads of its own)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a worker
    wall: dict[str, list[float]] = {name: [] for name in loops}
    cpu: dict[str, list[float]] = {name: [] for name in loops}
    try:
        for run in loops.values():  # warm caches and lazy imports
            run()
        order = random.Random(seed)  # each round in its own order: no loop always goes first
        for _ in range(rounds):
            for name, run in order.sample(list(loops.items()), len(loops)):
                w, c = _timed(run, time.process_time if threads_too else time.thread_time)
                wall[name].append(w)
                cpu[name].append(c)
    finally:
        torch.set_num_threads(threads)
    return wall, cpu


def _rounds(times: dict[str, list[float]], over: str, under: str = "bare") -> list[float]:
    return [a / b for a, b in zip(times[over], times[under])]


def _ratio(times: dict[str, list[float]], over: str, under: str = "bare") -> float:
    # Interleaved runs see the same machine state; the median of their ratios
    # is the figure. (Not the ratio of the fastest runs: on a shared host a
    # single outlier run decides it; it ranged from 0.85 to 1.42 here.)
    return statistics.median(_rounds(times, over, under))


def overhead(pairs: int, task: str = "digits", seed: int = 0, steps: int | None = None) -> Figure:
    """What the Monitor adds to a loop, with its defaults: instrumented over bare time per
    step, same run, interleaved.

    The benchmark's loop evaluates the model periodically (the trace's
    validation accuracy). That is the loop's work, not the Monitor's (it only
    records the numbers a loop hands to ``log_eval``), so the figure compares
    the instrumented loop with a bare loop that evaluates as often. The detail
    gives the same ratio recording every step (as the benchmark's own runs do)
    and what the evaluations cost against a bare loop without them.
    """
    setup = base_setup(get_task(task), seed)
    if steps is not None:  # a shorter run (the quick preset's): the same loops, fewer steps
        setup = replace(setup, steps=steps)
    wall, cpu = _interleaved(
        {
            "bare": lambda: train(setup, record=False),
            "evaluating": lambda: train(setup, record=False, evaluate=True),
            "instrumented": lambda: train(setup, every=DEFAULT_EVERY),
            "every step": lambda: train(setup, every=1),
        },
        pairs,
        seed,
    )
    per_round = _rounds(cpu, "instrumented", "evaluating")
    value = statistics.median(per_round)
    low, high = median_interval(per_round)
    goal = OVERHEAD_GOALS[task]
    step_ms = 1e3 * statistics.median(cpu["bare"]) / setup.steps
    return Figure(
        "{}. instrumented / bare loop, time per step ({})".format(*OVERHEAD_LABELS[task]),
        value,
        "x",
        f"<= {goal:.2f}",
        value <= goal,
        f"median of {pairs} interleaved rounds (95% interval {low:.3f}-{high:.3f}), {task} "
        f"healthy seed {seed}, {setup.steps} steps of {step_ms:.2f} ms bare, the Monitor's "
        f"default every={DEFAULT_EVERY}, both loops with {EVALUATIONS} evaluations, thread "
        f"CPU time; wall clock {_ratio(wall, 'instrumented', 'evaluating'):.3f}; recording "
        f"every step (as the benchmark's runs do) {_ratio(cpu, 'every step', 'evaluating'):.3f}; "
        f"the evaluations alone (against a bare loop without them) {_ratio(cpu, 'evaluating'):.3f}",
    )


def big_step_overhead(pairs: int, steps: int, seed: int = 0) -> Figure:
    """The same ratio on a step of 5-20 ms: a small ResNet in a loop of its own, the
    Monitor with its defaults (training accuracy kept); the detail gives every step."""
    wall, cpu = _interleaved(
        {
            "bare": lambda: train_resnet(steps, monitored=False, seed=seed),
            "instrumented": lambda: train_resnet(steps, monitored=True, seed=seed),
            "every step": lambda: train_resnet(steps, monitored=True, seed=seed, every=1),
        },
        pairs,
        seed,
    )
    per_round = _rounds(cpu, "instrumented")
    value = statistics.median(per_round)
    low, high = median_interval(per_round)
    step_ms = 1e3 * statistics.median(cpu["bare"]) / steps
    params = sum(p.numel() for p in small_resnet().parameters())
    return Figure(
        "1c. instrumented / bare loop, time per step (small ResNet)",
        value,
        "x",
        f"<= {BIG_STEP_GOAL:.2f}",
        value <= BIG_STEP_GOAL,
        f"median of {pairs} interleaved rounds (95% interval {low:.3f}-{high:.3f}), "
        f"{steps} steps of {step_ms:.1f} ms bare, {params} parameters, the Monitor's default "
        f"every={DEFAULT_EVERY}, no evaluations, thread CPU time; wall clock "
        f"{_ratio(wall, 'instrumented'):.3f}; recording every step "
        f"{_ratio(cpu, 'every step'):.3f}",
    )


class _Monitored(Instrument):
    """A user's Monitor riding in the loop (its three lines), checked every ``check_every``
    updates when given: what the early warnings add is the ratio of the two."""

    name = "monitored"

    def __init__(self, check_every: int | None) -> None:
        self.check_every = check_every
        self.monitor: Monitor | None = None
        self.warned = 0  # warnings raised (a healthy run: none)

    def start(self, model: Any, optimizer: Any, loss_fn: Any) -> None:
        self.monitor = Monitor(model, optimizer)

    def after_step(self, model: Any, optimizer: Any, batch: Any, loss: Any, step: int) -> None:
        assert self.monitor is not None
        self.monitor.step(loss)
        if self.check_every and step % self.check_every == 0:
            self.warned += len(self.monitor.check(show=False))


def check_overhead(pairs: int, steps: int | None = None, seed: int = 0) -> Figure:
    """What ``Monitor.check()`` adds to a loop monitored with the Monitor's defaults, checked
    every :data:`~faultbench.tools.early.CHECK_EVERY` updates (a shorter run: a third of its
    steps) as the callbacks do: checked over unchecked time per step, on the digits MLP
    (the cheapest step, so the largest share), interleaved rounds, no probe."""
    setup = base_setup(get_task("digits"), seed)
    if steps is not None:
        setup = replace(setup, steps=steps)
    every = min(CHECK_EVERY, max(1, setup.steps // 3))
    checking: list[_Monitored] = []

    def loop(check_every: int | None) -> None:
        instrument = _Monitored(check_every)
        train(setup, record=False, evaluate=False, instruments=[instrument])
        if check_every:
            checking.append(instrument)

    wall, cpu = _interleaved(
        {"bare": lambda: loop(None), "checked": lambda: loop(every)}, pairs, seed
    )
    per_round = _rounds(cpu, "checked")
    value = statistics.median(per_round)
    low, high = median_interval(per_round)
    checks = setup.steps // every
    return Figure(
        "1d. early-warning checks / the monitored loop, time per step (digits MLP)",
        value,
        "x",
        "",
        None,
        f"median of {pairs} interleaved rounds (95% interval {low:.3f}-{high:.3f}), digits "
        f"healthy seed {seed}, {setup.steps} steps, Monitor.check() every {every} updates "
        f"({checks} checks a run, no probe) against the same Monitor unchecked, thread CPU "
        f"time; wall clock {_ratio(wall, 'checked'):.3f}; warnings raised on the healthy "
        f"runs: {sum(c.warned for c in checking)}",
    )


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of ``values``: the order
    statistics whose ranks a Binomial(n, 1/2) count puts on either side of it."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return math.nan, math.nan
    k = max(0, int(binom.ppf((1 - confidence) / 2, n, 0.5)) - 1)  # 0-based lower rank
    return ordered[k], ordered[n - 1 - k]


def _timed(
    fn: Callable[[], object], clock: Callable[[], float] = time.thread_time
) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), clock()
    fn()
    return time.perf_counter() - wall, clock() - cpu


#: The three step sizes each instrument is priced on: (task or None for the ResNet, label).
INSTRUMENT_MODELS = (("digits", "digits MLP"), ("shapes", "shapes CNN"), (None, "small ResNet"))


def instrument_overhead(number: int, name: str, config: BenchConfig, seed: int = 0) -> list[Figure]:
    """What instrument ``name`` adds to a step: the loop with it attached over the same loop
    without it, on the three step sizes of figure 1, interleaved rounds, medians.

    Neither side records a trace or evaluates, so the ratio is the instrument's alone; the
    CPU time is the whole process's (an instrument may work in threads of its own). An
    instrument that needs a process of its own (TrainCheck) is timed there, by the wall
    clock of its loop, against the bare loop's here, in at most ``own_process_rounds``
    rounds (each starts an interpreter and the tool: seconds apiece, not counted).
    """
    factory = INSTRUMENTS.get(name)
    own = needs_own_process([factory])
    figures = []
    for letter, (task, label) in zip("abc", INSTRUMENT_MODELS, strict=True):
        pairs = {"digits": config.pairs, "shapes": config.cnn_pairs}.get(
            task or "", config.big_pairs
        )
        steps = config.big_steps if task is None else _steps(task, config)
        if own:
            pairs = min(pairs, config.own_process_rounds)
            steps = min(steps, config.own_process_steps or steps)
            per_round, bare, records = _own_process_rounds(name, factory, task, steps, pairs, seed)
            clock, wall_note = "wall clock of the loop (the instrument in its own process)", ""
        else:
            loops, records = _instrument_loops(name, factory, task, steps, seed)
            wall, cpu = _interleaved(loops, pairs, seed, threads_too=True)
            per_round, bare = _rounds(cpu, "instrumented"), cpu["bare"]
            clock = "process CPU time"
            wall_note = f"; wall clock {_ratio(wall, 'instrumented'):.3f}"
        value = statistics.median(per_round)
        low, high = median_interval(per_round)
        step_ms = 1e3 * statistics.median(bare) / steps
        stopped = next((str(r["error"]) for r in records if r.get("error")), "")
        figures.append(
            Figure(
                f"{number}{letter}. instrument '{name}' / bare loop, time per step ({label})",
                value,
                "x",
                "",
                None,
                f"median of {pairs} interleaved rounds (95% interval {low:.3f}-{high:.3f}), "
                f"{steps} steps of {step_ms:.2f} ms bare, no Monitor and no evaluations on "
                f"either side, {clock}{wall_note}"
                + (f"; the instrument's tool stopped: {stopped[:120]}" if stopped else ""),
            )
        )
    return figures


def _steps(task: str, config: BenchConfig) -> int:
    return config.run_steps or get_task(task).defaults.steps


def _loop(task: str | None, steps: int, seed: int, instruments: list[Instrument]) -> None:
    """The loop of one step size, bare or with ``instruments``: no Monitor, no evaluations."""
    if task is None:
        train_resnet(steps, monitored=False, seed=seed, instruments=instruments)
        return
    setup = replace(base_setup(get_task(task), seed), steps=steps)
    train(setup, record=False, evaluate=False, instruments=instruments)


class _Keeping(Instrument):
    """Wraps an instrument to keep its record (the bench only times the loop)."""

    def __init__(self, inner: Instrument, records: list[dict[str, object]]) -> None:
        self.inner, self.records, self.name = inner, records, inner.name

    def start(self, *args: Any) -> None:
        self.inner.start(*args)

    def after_backward(self, *args: Any) -> None:
        self.inner.after_backward(*args)

    def after_step(self, *args: Any) -> None:
        self.inner.after_step(*args)

    def finish(self) -> dict[str, Any]:
        record = self.inner.finish()
        self.records.append(dict(record))
        return record


def _instrument_loops(
    name: str, factory: Factory, task: str | None, steps: int, seed: int
) -> tuple[dict[str, Callable[[], object]], list[dict[str, object]]]:
    """The bare and instrumented loops of one step size, and the list that receives the
    instrument's record of each instrumented run."""
    records: list[dict[str, object]] = []
    return (
        {
            "bare": lambda: _loop(task, steps, seed, []),
            "instrumented": lambda: _loop(task, steps, seed, [_Keeping(factory(), records)]),
        },
        records,
    )


def _own_process_rounds(
    name: str, factory: Factory, task: str | None, steps: int, rounds: int, seed: int
) -> tuple[list[float], list[float], list[dict[str, object]]]:
    """Per round: the instrumented loop's wall seconds in a process of its own over the bare
    loop's here; the bare seconds; the instrument's records."""
    _loop(task, steps, seed, [])  # warm this process's caches for the bare side
    ratios, bare, records = [], [], []
    for _ in range(rounds):
        start = time.perf_counter()
        _loop(task, steps, seed, [])
        bare.append(time.perf_counter() - start)
        seconds, record = in_own_process(functools.partial(_timed_with, factory, task, steps, seed))
        ratios.append(seconds / bare[-1])
        records.append(record)
    return ratios, bare, records


def _timed_with(
    factory: Factory, task: str | None, steps: int, seed: int
) -> tuple[float, dict[str, object]]:
    """In the instrument's own process: build it, then time the loop with it attached."""
    records: list[dict[str, object]] = []
    with one_thread():
        instrument = _Keeping(factory(), records)
        start = time.perf_counter()
        _loop(task, steps, seed, [instrument])
        return time.perf_counter() - start, records[0]


def parallel_efficiency(runs: int, workers: int | None = None) -> Figure:
    """``t1 / (n * tn)`` for the same runs one at a time and ``n`` at a time, on one warm pool.

    One at a time on a pool of ``n`` is one worker's time: the others sit idle. One
    pool, started once, instead of a pool per width: a start costs each worker its
    imports (torch, and torch's first deterministic-algorithms call), seconds apiece.
    """
    n = workers or len(os.sched_getaffinity(0))
    task = get_task("digits")
    healthy = canonical_conditions(["healthy"])[0]
    jobs = [make_job(RunSpec(task.name, task.fingerprint, healthy, s)) for s in range(runs)]
    engine = LocalEngine(n)
    try:
        start = time.perf_counter()
        list(engine.map_unordered(_warm_worker, range(n)))  # spawn + import torch
        pool_start = time.perf_counter() - start
        start = time.perf_counter()
        results = [r for job in jobs for _, r in engine.map_unordered(train_record, [job])]
        one = time.perf_counter() - start
        start = time.perf_counter()
        results += [r for _, r in engine.map_unordered(train_record, jobs)]
        all_at_once = time.perf_counter() - start
    finally:
        engine.close()
    failed = [r for r in results if _failed(r)]
    if failed:
        raise RuntimeError(f"benchmark runs failed: {failed[0]}")
    eff = one / (n * all_at_once)
    return Figure(
        f"3. parallel efficiency, {n} workers vs 1",
        eff,
        "",
        ">= 0.85",
        eff >= 0.85,
        f"{runs} digits runs: {one:.1f}s one at a time, {all_at_once:.1f}s {n} at a time; "
        f"one warm pool (its start, {pool_start:.1f}s, excluded)",
    )


def _warm_worker(_: int) -> int:
    # A worker's first run pays one-off costs (imports, building the task,
    # torch's first kernels); a short run pays them here, outside the timing.
    train(replace(base_setup(get_task("digits"), 0), steps=WARM_STEPS))
    # Stay busy a moment so the next warm-up task lands on another worker:
    # otherwise one worker may warm up twice and the other start training cold.
    time.sleep(WARM_HOLD)
    return os.getpid()


def _failed(result: object) -> bool:
    return isinstance(result, BaseException) or not getattr(result, "ok", False)


def grid_times(seeds: int, tasks: tuple[str, ...] = BENCH_TASKS) -> list[Figure]:
    """Probe ratio, cold benchmark time and warm rescoring time, in a fresh store."""
    from faultbench.reporting import ahead
    from faultbench.scoring.diagnosis import diagnoser_names
    from faultbench.scoring.evaluate import evaluate

    has_rules = PROBE_DIAGNOSER in diagnoser_names()
    cold_name = PROBE_DIAGNOSER if has_rules else WARM_DIAGNOSER
    with tempfile.TemporaryDirectory(prefix="faultbench-bench-") as root:
        engine = LocalEngine()
        try:
            start = time.perf_counter()
            # As `faultbench report` does it: train every run, then diagnose on every worker,
            # then score (reading the answers back).
            # One store throughout, as the report keeps one: what it read, it reads once.
            store = Store(root)
            asked = [ahead.Evaluation(cold_name, t, "classic", seeds) for t in tasks]
            trained = ahead.train_all(asked, store, engine)
            ahead.diagnose_ahead(asked, store, engine, timeout=DEFAULT_TIMEOUT, isolate=None)
            cold = [
                evaluate(cold_name, t, seeds=seeds, grid="classic", store=store, engine=engine)
                for t in tasks
            ]
            cold_s = time.perf_counter() - start
        finally:
            engine.close()
        warm_engine = LocalEngine()
        start = time.perf_counter()
        warm = [
            evaluate(
                WARM_DIAGNOSER,
                t,
                seeds=seeds,
                grid="classic",
                store=Store(root),
                engine=warm_engine,
            )
            for t in tasks
        ]
        warm_s = time.perf_counter() - start
        pool_started = warm_engine._executor is not None
        warm_engine.close()
    runs = sum(r.total for r in cold)
    trained_warm = sum(r.trained for r in warm)
    return [
        _probe_figure(cold if has_rules else None),
        Figure(
            "4a. cold canonical benchmark",
            cold_s,
            "s",
            f"<= {COLD_GOAL} (5 seeds, 2 cores)" if seeds == 5 else "",
            cold_s <= COLD_GOAL if seeds == 5 else None,
            f"{cold_name} on {' + '.join(tasks)}, {seeds} seed(s), {runs} runs trained "
            f"{trained + sum(r.trained for r in cold)}, fresh store, pool start included"
            + ("" if has_rules else f"; '{PROBE_DIAGNOSER}' not registered yet"),
        ),
        Figure(
            "4b. warm rescoring of stored runs",
            warm_s,
            "s",
            "<= 10, trains nothing" if seeds == 5 else "trains nothing",
            trained_warm == 0 and not pool_started and (warm_s <= 10 if seeds == 5 else True),
            f"{WARM_DIAGNOSER} on the same {runs} runs: trained {trained_warm}, "
            f"process pool started: {'yes' if pool_started else 'no'}",
        ),
    ]


def _probe_figure(reports: list | None) -> Figure:  # type: ignore[type-arg]
    name = "2. rules probe seconds / training seconds per run"
    if reports is None:
        return Figure(name, None, "x", "<= 0.5", None, f"'{PROBE_DIAGNOSER}' not available yet")
    ratios = [
        r.diagnose_seconds / r.train_seconds
        for report in reports
        for r in report.results
        if r.train_seconds > 0 and r.status == "ok"
    ]
    value = statistics.fmean(ratios) if ratios else None
    steps = statistics.fmean(r.probe_steps for rep in reports for r in rep.results)
    return Figure(
        name,
        value,
        "x",
        "<= 0.5",
        None if value is None else value <= 0.5,
        f"mean over {len(ratios)} runs of the canonical grid; {steps:.0f} probe steps per "
        "diagnosis on average",
    )


def peak_memory() -> Figure:
    """Peak resident memory of this process and of its largest child."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return Figure(
        "5. peak resident memory",
        own,
        " MiB",
        "",
        None,
        f"driver process; largest worker process {child:.0f} MiB (ru_maxrss)",
    )


def run_bench(quick: bool = False, emit: Callable[[str], None] = print) -> list[Figure]:
    """Measure every figure, emitting each line as soon as it is known."""
    config = BenchConfig.preset(quick)
    emit(f"faultbench bench{' --quick' if quick else ''} on {machine()}")
    figures: list[Figure] = []
    for measure in (
        lambda: overhead(config.pairs, "digits", steps=config.run_steps),
        lambda: overhead(config.cnn_pairs, "shapes", steps=config.run_steps),
        lambda: big_step_overhead(config.big_pairs, config.big_steps),
        lambda: check_overhead(config.pairs, steps=config.run_steps),
    ):
        figures.append(measure())
        emit(figures[-1].line())
    grid = grid_times(config.seeds, config.tasks)
    emit(grid[0].line())
    figures.append(grid[0])
    figures.append(parallel_efficiency(config.parallel_runs))
    emit(figures[-1].line())
    for figure in grid[1:]:
        figures.append(figure)
        emit(figure.line())
    figures.append(peak_memory())
    emit(figures[-1].line())
    for number, name in enumerate(INSTRUMENTS.names(), start=6):
        for figure in instrument_overhead(number, name, config):
            figures.append(figure)
            emit(figure.line())
    return figures
