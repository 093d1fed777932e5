"""``cockpit-live``: Cockpit's economy instruments attached to the benchmark's own loop.

Cockpit (cockpit-for-pytorch 1.0.2, on BackPACK 1.7.1) is meant to ride in
the user's training loop. The ``cockpit`` adapter (:mod:`.cockpit_tool`) can
only replay a run through its probe, which rebuilds the model, the loss and
the data but not the loop, so the loop's own bugs replay as healthy runs.
Here the :class:`CockpitInstrument` rides in the loop as the run trains
(:mod:`faultbench.training.instruments`), and this diagnoser reads what
Cockpit recorded there with the replay adapter's symptoms and thresholds
(tuned on digits, as the replay's were), plus the two things only the loop
shows Cockpit: the gradient the optimizer is handed, and the update it makes.

**A side copy, not the run's model.** BackPACK's ``extend`` leaves a model's
forward pass and gradients bit-identical (checked on the digits MLP and the
shapes CNN), so attaching it to the run itself would keep the numbers; it is
not done, for three reasons. Cockpit must own the backward pass (``with
cockpit(step, info): loss.backward()``), and an instrument must not take the
loop's backward away from it; BackPACK raises inside that backward for a
module it has no extension for (a GRU, a LayerNorm), which would break the
run instead of the instrument; and its hooks would stay on the model the
Monitor and the evaluations use. So the instrument keeps a BackPACK-extended
copy of the model. On each step Cockpit tracks it copies the run's weights and
buffers into the copy, runs the step's batch through it (the random state the
run's forward drew from restored first, so a dropout mask is the run's; the
run's own generator is left as it was), backpropagates with Cockpit's
extensions, and then hands Cockpit the *run's* gradient in ``.grad``: the
gradient as the loop left it, accumulated when ``zero_grad`` is missing. The
individual gradients are the batch's own, as BackPACK computes them in the
run. Updates and distances are the run's, read from its weights before and
after each update (Alpha is projected on that update for every optimizer: a
stand-in optimizer makes Cockpit take its weight-difference path, which it
otherwise takes for every optimizer but plain SGD). A parameter with
``requires_grad = False`` is refused by Cockpit (``Cockpit(params)`` raises);
the instrument leaves such parameters out, as a user would, and records
which. A failure inside Cockpit stops the tracking and is recorded with
what was tracked before it; the run goes on untouched.

What it still cannot see: Cockpit measures no time spent waiting for data
(its ``Time`` quantity is not part of ``economy``, and it times steps, not
the loader), so a starved loader stays invisible to it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.diagnosers import _tools, cockpit_tool
from faultbench.diagnosers._tools import Symptom
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis
from faultbench.scoring.run import Run
from faultbench.training.instruments import INSTRUMENTS, Instrument

NAME = "cockpit-live"
INSTRUMENT = "cockpit"
CONFIGURATION = cockpit_tool.CONFIGURATION  # economy, as the replay
TRACK_EVERY = cockpit_tool.TRACK_EVERY  # the replay's schedule: its quantities at the same steps

# The loop's symptoms, read off what Cockpit tracked live; each chosen on digits runs
# only (5 seeds of the classic grid, every step of 600 tracked every 10th).
# Digits: the median GradNorm of the last five tracked steps over the first is 0.11-0.26 on
# healthy runs, up to 2.8 with dead units and 7.4 at 100x the rate, 39-58 when zero_grad is
# missing (gradients summed over every step so far): the threshold sits between.
GRAD_GROWTH = 15.0
# A tracked parameter whose UpdateSize is exactly 0 on every tracked step while its
# GradNorm is not: the optimizer never moves it. Digits: none on any run but frozen_layer's.
LATE_STEPS = cockpit_tool.LATE_STEPS

#: What the loop shows Cockpit, then the replay's symptoms (the same order and thresholds).
SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(
        "parameters_refused",
        "frozen_layer",
        "Cockpit refuses a parameter with requires_grad=False (the instrument left it out)",
        "Cockpit's own check",
    ),
    Symptom(
        "never_updated",
        "frozen_layer",
        "UpdateSize of a parameter is 0 on every tracked step while its GradNorm is not",
        "exact",
    ),
    Symptom(
        "gradient_grows",
        "missing_zero_grad",
        f"median GradNorm of the last {LATE_STEPS} tracked steps > {GRAD_GROWTH:g} x the "
        "first's (the gradient the optimizer is handed, as the loop left it)",
        "tuned on digits",
    ),
    *cockpit_tool.SYMPTOMS,
)


class _UpdateFromWeights:
    """Stands in for the run's optimizer in Cockpit's ``info``.

    Cockpit's Alpha computes the update from BackPACK's quantities only for
    plain SGD (for any other optimizer it reads the weights before and after
    the update); handed this instead, it reads the weights for every optimizer,
    so Alpha is projected on the update the run's loop actually made.
    """


@INSTRUMENTS.register(INSTRUMENT)
class CockpitInstrument(Instrument):
    """Cockpit's ``economy`` quantities, tracked every ``TRACK_EVERY`` steps of the run's
    loop on a BackPACK-extended copy of its model that carries the run's weights and
    gradients (see the module's docstring)."""

    name = INSTRUMENT
    libraries = ("cockpit-for-pytorch", "backpack-for-pytorch")

    def __init__(self) -> None:
        self._backpack = _tools.require("backpack", diagnoser=NAME)
        self._cockpit = _tools.require("cockpit", diagnoser=NAME)
        self._error = ""
        self._rng: torch.Tensor | None = None  # the generator's state at the next forward
        self._cp: Any = None
        self._tracked: list[str] = []
        self._refused: list[str] = []
        self._uncovered: list[str] = []

    def start(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> None:
        """Copy and extend the model; build the cockpit on the copy's trainable parameters."""
        from cockpit.utils import schedules
        from cockpit.utils.configuration import configuration

        self._loss_fn = loss_fn
        with _tools.quiet():
            self._side = self._backpack.extend(copy.deepcopy(model))
        self._pairs = list(
            zip(
                [*model.parameters(), *model.buffers()],
                [*self._side.parameters(), *self._side.buffers()],
                strict=True,
            )
        )
        named = list(zip(model.named_parameters(), self._side.parameters(), strict=True))
        self._grads = [(live, side) for (_, live), side in named if live.requires_grad]
        self._tracked = [name for (name, live), _ in named if live.requires_grad]
        self._refused = [name for (name, live), _ in named if not live.requires_grad]
        quantities = configuration(CONFIGURATION, track_schedule=schedules.linear(TRACK_EVERY))
        self._cp = self._cockpit.Cockpit([side for _, side in self._grads], quantities=quantities)
        self._keep_rng(0)

    def _wanted(self, global_step: int) -> bool:
        return not self._error and any(q.should_compute(global_step) for q in self._cp.quantities)

    def _keep_rng(self, global_step: int) -> None:
        # The state the run's next forward draws from (dropout): read, never set.
        if self._wanted(global_step):
            self._rng = torch.get_rng_state()

    def after_backward(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: tuple[torch.Tensor, torch.Tensor],
        output: torch.Tensor,
        loss: torch.Tensor,
        step: int,
    ) -> None:
        """On a step Cockpit tracks, run its quantities on the copy (see the module)."""
        global_step = step - 1  # Cockpit counts from 0, as the replay calls it
        if not self._wanted(global_step):
            return
        try:
            self._track(global_step, batch)
        except Exception as exc:  # Cockpit's failure is recorded, never the run's
            self._error = f"step {step}: {type(exc).__name__}: {exc}"
            self._uncovered = self._without_batch_grad(batch)

    def _track(self, global_step: int, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        xb, yb = batch
        with torch.no_grad():
            for live, side in self._pairs:
                side.copy_(live)
        for _, side in self._grads:
            side.grad = None
        with torch.random.fork_rng(devices=[]), torch.enable_grad(), _tools.quiet():
            if self._rng is not None:
                torch.set_rng_state(self._rng)
            out = self._side(xb)
            loss = self._loss_fn(out, yb)
            info = {
                "batch_size": len(yb),
                "individual_losses": _individual_losses(self._loss_fn, out, yb),
                "loss": loss,
                "optimizer": _UpdateFromWeights(),
            }
            with self._cp(global_step, info=info):
                loss.backward(create_graph=self._cp.create_graph(global_step))
                with torch.no_grad():  # the gradient the run's optimizer is handed
                    for live, side in self._grads:
                        side.grad = live.grad.detach().clone() if live.grad is not None else None
                        if side.grad is None:
                            side.grad = torch.zeros_like(side)

    def _without_batch_grad(self, batch: tuple[torch.Tensor, torch.Tensor]) -> list[str]:
        """The tracked parameters BackPACK gives no individual gradients (a GRU's, a
        LayerNorm's: it has no extension for them), which every economy quantity needs:
        what usually stopped Cockpit. One backward of the copy, as the replay adapter checks."""
        from backpack import backpack, extensions

        xb, yb = batch
        side = dict(self._side.named_parameters())
        try:
            with torch.random.fork_rng(devices=[]), torch.enable_grad(), _tools.quiet():
                loss = self._loss_fn(self._side(xb), yb)
                with backpack(extensions.BatchGrad()):
                    loss.backward()
        except Exception:
            return []
        missing = [n for n in self._tracked if getattr(side[n], "grad_batch", None) is None]
        for p in side.values():
            p.grad = None
            if hasattr(p, "grad_batch"):
                del p.grad_batch
        return missing

    def after_step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: tuple[torch.Tensor, torch.Tensor],
        loss: torch.Tensor,
        step: int,
    ) -> None:
        """Keep the generator's state if Cockpit tracks the next step."""
        self._keep_rng(step)

    def gave_up(self) -> bool:
        """Cockpit failed on a tracked step (the model or the loss is one BackPACK cannot
        extend): it tracks nothing more on this run."""
        return bool(self._error)

    def finish(self) -> dict[str, Any]:
        """Cockpit's output by step (tensors as lists), what it tracked and any failure."""
        with _tools.quiet():
            output = self._cp.get_output() if self._cp is not None else {}
        return {
            "configuration": CONFIGURATION,
            "track_every": TRACK_EVERY,
            "parameters": self._tracked,
            "refused": self._refused,
            "error": self._error,
            "no_batch_grad": self._uncovered,
            "output": {str(step): _plain(values) for step, values in sorted(output.items())},
        }


def _individual_losses(
    loss_fn: Callable[..., torch.Tensor], output: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """The run's loss per example (Alpha's noise estimate): the loss function at
    ``reduction="none"``, or the replay's cross-entropy where it takes no such argument."""
    try:
        losses = loss_fn(output, target, reduction="none")
    except TypeError:
        losses = F.cross_entropy(output, target, reduction="none")
    return losses.detach()


def _plain(value: Any) -> Any:
    """Cockpit's output as JSON: tensors and numpy values as lists and numbers."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def cockpit_output(seen: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The instrument's record as the replay's ``instrument()`` returns Cockpit's output."""
    return {int(step): values for step, values in seen.get("output", {}).items()}


def loop_numbers(output: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """What only the loop shows Cockpit: how the gradient grows, what never moves."""
    steps = sorted(output)
    norms = [output[s]["GradNorm"] for s in steps if "GradNorm" in output[s]]
    sizes = [output[s]["UpdateSize"] for s in steps if "UpdateSize" in output[s]]
    totals = [math.sqrt(sum(float(g) ** 2 for g in norm)) for norm in norms]
    growth = math.nan
    if totals and totals[0] > 0:
        growth = float(np.median(totals[-LATE_STEPS:])) / totals[0]
    never: list[int] = []
    if sizes and norms:
        for i in range(len(sizes[0])):
            moved = any(float(size[i]) != 0.0 for size in sizes)
            pushed = any(float(norm[i]) > 0.0 for norm in norms)
            if pushed and not moved:
                never.append(i)
    return {"grad_growth": growth, "never_updated": never}


@DIAGNOSERS.register(NAME)
class CockpitLiveDiagnoser:
    """Cockpit's economy instruments as they rode in the run's own loop."""

    name = NAME
    instrument = INSTRUMENT  # trained with the Cockpit instrument in the loop
    probes = False  # reads what Cockpit recorded in the loop
    tuned_on: frozenset[str] = frozenset({"digits"})
    subset_seeds = 1  # each run is trained again with Cockpit: seed 0 of each grid
    reads_trace = False  # never reads run.trace: its answer cannot depend on the Monitor's sampling

    def __init__(self) -> None:
        _tools.require("backpack", diagnoser=NAME)
        _tools.require("cockpit", diagnoser=NAME)

    def diagnose(self, run: Run) -> Diagnosis:
        """Name the first symptom Cockpit's live quantities show (healthy if none)."""
        seen = run.instruments.get(INSTRUMENT)
        if seen is None:
            return _tools.answer(
                "unknown", "no cockpit record", {"why": "the run trained without the instrument"}
            )
        output = cockpit_output(seen)
        if not output:  # as the replay answers for a model BackPACK cannot extend
            why = {"why": seen.get("error", ""), "no_batch_grad": seen.get("no_batch_grad", [])}
            return _tools.answer("unknown", "cockpit cannot instrument this model", why)
        numbers: dict[str, Any] = {**cockpit_tool.summarize(output), **loop_numbers(output)}
        shown = {
            "parameters_refused": bool(seen.get("refused")),
            "never_updated": bool(numbers["never_updated"]),
            "gradient_grows": numbers["grad_growth"] > GRAD_GROWTH,
            **cockpit_tool.present(run, numbers),
        }
        never = [seen["parameters"][i] for i in numbers.pop("never_updated")]
        found = {
            "numbers": numbers,
            "present": shown,
            "never_updated": never,
            "refused": list(seen.get("refused", [])),
            "cockpit_error": seen.get("error", ""),
        }
        for symptom in SYMPTOMS:
            if shown[symptom.name]:
                return _tools.answer(symptom.label, symptom.name, found)
        return _tools.answer("healthy", "no symptom", found)
