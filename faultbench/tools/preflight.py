"""Preflight: one gated training step, phase by phase, before a long run is paid for.

Each phase (data, forward and loss, backward, update, validation, resume) is
timed, its peak memory is measured, and it passes or fails on checks that a
broken pipeline fails. Preflight works on a copy of the model and optimizer, so
the caller's objects are left as they were.

A sequence pilot (``y_train`` of shape ``(examples, positions)``: the token each
position predicts, -100 where the loss skips it) gets the data phase a
language model needs: a few examples decoded with the tokens that count in the
loss marked, their lengths, the padding and the truncation; the phase fails
when an example has no token counted, when padding counts in the loss, or
(when the pilot knows its prompts) when a prompt token does.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import Condition, base_setup, condition
from faultbench.scoring.run import accuracy
from faultbench.tasks.task import Task, get_task
from faultbench.tools.checkpoint_roundtrip import (
    break_checkpoint,
    compare_reload,
    reload_elsewhere,
    weight_sums,
)
from faultbench.tools.phase_memory import MEMORY, metered
from faultbench.training.model import build_model

PHASES = ("data", "forward_loss", "backward", "update", "validation", "resume")
BREAKS = ("truncate", "drop_optimizer")  # ways to break the checkpoint on purpose
FIRST_LOSS_BAND = (2 / 3, 3 / 2)  # first loss / ln C outside this: inputs or init are off
SILENT_CHECK_EXAMPLES = 512  # examples a unit silent on one microbatch is re-checked on
IGNORE_INDEX = -100  # a sequence target the loss skips
SHOWN_EXAMPLES = 3  # examples a sequence pilot's data phase decodes


@dataclass(frozen=True, eq=False)
class Pilot:
    """A user's model, loss, optimizer and data: what one preflight step needs."""

    model: nn.Module  # the model as initialized (preflight steps a copy)
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # loss_fn(output, target)
    optimizer: torch.optim.Optimizer  # built over ``model``'s parameters
    X_train: torch.Tensor  # training inputs, one row per example
    y_train: torch.Tensor  # training class indices
    X_val: torch.Tensor  # validation inputs
    y_val: torch.Tensor  # validation class indices
    batch_size: int  # microbatch: examples per forward and backward pass
    accumulation_steps: int = 1  # microbatches summed into one update
    data_replicas: int = 1  # data-parallel replicas, each with its own microbatch
    n_classes: int | None = None  # None: the largest label + 1
    mask: torch.Tensor | None = None  # optional (examples x positions): 1 where X_train is real
    lengths: torch.Tensor | None = None  # optional: real positions per training example
    # A sequence pilot (y of shape examples x positions, -100 where the loss skips):
    prompts: torch.Tensor | None = None  # optional: prompt tokens per training example
    vocab: tuple[str, ...] | None = None  # optional: token strings by id, to decode examples
    pad_id: int | None = None  # optional: the padding id (else the mask or lengths say)

    @property
    def sequences(self) -> bool:
        """Whether the targets are tokens per position (a language model's) rather than classes."""
        return self.y_train.dim() == 2

    @property
    def classes(self) -> int:
        """The number of classes the model must output."""
        if self.n_classes is not None:
            return self.n_classes
        return int(max(int(self.y_train.max()), int(self.y_val.max()))) + 1

    @property
    def examples_per_update(self) -> int:
        """Microbatch x accumulation steps x data replicas."""
        return self.batch_size * self.accumulation_steps * self.data_replicas

    @property
    def updates_per_epoch(self) -> int:
        """Full updates in one pass over the training set (a last partial one is dropped)."""
        return len(self.y_train) // self.examples_per_update


@dataclass(frozen=True)
class Phase:
    """One gate of the preflight."""

    phase: str  # one of PHASES
    inputs: str  # the sizes the phase worked on
    seconds: float  # wall time of the phase
    peak_rss_mib: float | None  # process high-water mark during the phase (CPU memory)
    passed: bool  # the gate's verdict
    detail: str  # what was checked and found
    cuda_max_allocated_mib: float | None = None  # torch.cuda.max_memory_allocated, on CUDA
    cuda_max_reserved_mib: float | None = None  # torch.cuda.max_memory_reserved, on CUDA


@dataclass(frozen=True)
class PreflightReport:
    """Every phase's verdict, plus the arithmetic of an update."""

    phases: tuple[Phase, ...]  # in PHASES order
    device: str  # where the step ran
    examples_per_update: int  # microbatch x accumulation x replicas
    updates_per_epoch: int  # training examples // examples per update
    pilot_summary: str  # what the numbers above are made of
    memory_note: str  # how the CPU peak was measured
    examples: tuple[str, ...] = ()  # a sequence pilot's decoded examples, loss tokens marked

    @property
    def passed(self) -> bool:
        """Whether every gate passed."""
        return all(p.passed for p in self.phases)

    @property
    def failed(self) -> list[str]:
        """Names of the phases that failed."""
        return [p.phase for p in self.phases if not p.passed]

    def table(self) -> pd.DataFrame:
        """One row per phase; CUDA columns only where the step ran on CUDA."""
        table = pd.DataFrame([dataclasses.asdict(p) for p in self.phases])
        table["verdict"] = table.pop("passed").map({True: "pass", False: "FAIL"})
        if table["cuda_max_allocated_mib"].isna().all():
            table = table.drop(columns=["cuda_max_allocated_mib", "cuda_max_reserved_mib"])
        detail = table.pop("detail")  # last: the long text column reads best at the end
        return table.assign(detail=detail).set_index("phase")

    def __str__(self) -> str:
        verdict = "all gates pass" if self.passed else f"FAILED: {', '.join(self.failed)}"
        shown = []
        if self.examples:
            shown = [
                "data: training examples as the loss sees them ([token]: a target that counts "
                "in the loss; the rest are inputs only):",
                *(f"  {line}" for line in self.examples),
            ]
        return "\n".join(
            [
                f"preflight on {self.device}; peak memory: {self.memory_note}",
                self.table().to_string(float_format=lambda v: f"{v:.3f}"),
                *shown,
                f"examples per update: {self.examples_per_update} ({self.pilot_summary})",
                f"updates per epoch: {self.updates_per_epoch}",
                f"verdict: {verdict}",
            ]
        )


@dataclass
class _State:
    """What the phases hand each other (mutable: one step's working set)."""

    pilot: Pilot
    model: nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    sampler: torch.Generator
    step: int = 0
    steps_counted: int = 0
    values: dict[str, Any] = field(default_factory=dict)


def pilot_for_task(task: str | Task, cond: Condition | None = None, *, seed: int = 0) -> Pilot:
    """The benchmark's own recipe of ``task`` under ``cond`` as a pilot: its model, loss
    and optimizer, built by the recipe's parts exactly as the benchmark loop builds them.
    """
    task = get_task(task)
    setup = (cond or condition()).apply(base_setup(task, seed))
    model = build_model(setup)
    seq = setup.sequences
    if seq is not None:  # the loss mask, the prompts and the vocabulary, as the run has them
        return Pilot(
            model=model,
            loss_fn=setup.loss,
            optimizer=setup.make_optimizer(setup.param_groups(model, setup), setup),
            X_train=torch.from_numpy(setup.X_train),
            y_train=torch.from_numpy(setup.y_train),
            X_val=torch.from_numpy(setup.X_val),
            y_val=torch.from_numpy(setup.y_val),
            batch_size=setup.batch_size,
            n_classes=setup.n_outputs,
            lengths=torch.from_numpy(seq.length_train),
            prompts=torch.from_numpy(seq.prompt_train),
            vocab=seq.vocab,
            pad_id=seq.pad,
        )
    return Pilot(
        model=model,
        loss_fn=setup.loss,
        optimizer=setup.make_optimizer(setup.param_groups(model, setup), setup),
        X_train=torch.from_numpy(setup.X_train),
        y_train=torch.from_numpy(setup.y_train),
        X_val=torch.from_numpy(setup.X_val),
        y_val=torch.from_numpy(setup.y_val),
        batch_size=setup.batch_size,
        n_classes=setup.n_outputs,
    )


def preflight(
    pilot: Pilot, *, device: str = "cpu", seed: int = 0, break_checkpoint: str | None = None
) -> PreflightReport:
    """Run the six gates on one training step of ``pilot``.

    Args:
        pilot: The model, loss, optimizer and data.
        device: Where the step runs ("cpu", "cuda", "cuda:1", "mps").
        seed: Seeds the batch sampler.
        break_checkpoint: "truncate" or "drop_optimizer" breaks the checkpoint
            before the reload, to see the resume gate fail.

    Raises:
        FaultbenchError: an unknown ``break_checkpoint`` or an unavailable device.
    """
    if break_checkpoint is not None and break_checkpoint not in BREAKS:
        from faultbench.core.errors import unknown_name

        raise unknown_name("checkpoint break", break_checkpoint, BREAKS)
    dev = _device(device)
    model, optimizer = copy.deepcopy((pilot.model, pilot.optimizer))  # keeps them paired
    model.to(dev).train()
    state = _State(pilot, model, optimizer, dev, torch.Generator().manual_seed(seed))
    state.values["break"] = break_checkpoint
    optimizer.register_step_post_hook(
        lambda *_: setattr(state, "steps_counted", state.steps_counted + 1)
    )
    phases: list[Phase] = []
    broken: str | None = None
    for name, gate in zip(PHASES, _GATES, strict=True):
        if broken is not None:
            phases.append(Phase(name, "-", 0.0, None, False, f"not run: {broken} raised"))
            continue
        phases.append(_measured(name, gate, state))
        if phases[-1].detail.startswith("error:"):
            broken = name
    pp = pilot
    summary = (
        f"microbatch {pp.batch_size} x accumulation {pp.accumulation_steps} x "
        f"replicas {pp.data_replicas}; {len(pp.y_train)} training examples"
    )
    return PreflightReport(
        tuple(phases),
        str(dev),
        pp.examples_per_update,
        pp.updates_per_epoch,
        summary,
        MEMORY.note,
        tuple(state.values.get("examples", ())),
    )


def _device(device: str) -> torch.device:
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise FaultbenchError(f"Unknown device '{device}': {exc}") from None
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "mps": bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
    }
    if not available.get(dev.type, False):
        usable = [k for k, v in available.items() if v]
        raise FaultbenchError(
            f"Device '{device}' is not available here; usable: {', '.join(usable)}"
        )
    return dev


def _measured(
    name: str, gate: Callable[[_State], tuple[str, list[str], str]], state: _State
) -> Phase:
    with metered(state.device) as mem:
        try:
            inputs, problems, ok_detail = gate(state)
        except Exception as exc:  # a crash is this gate's failure, reported, not raised
            inputs, problems, ok_detail = "-", [f"error: {type(exc).__name__}: {exc}"], ""
    detail = "; ".join(problems) if problems else ok_detail
    return Phase(
        name,
        inputs,
        float(mem["seconds"] or 0.0),
        mem["peak_rss_mib"],
        not problems,
        detail,
        mem.get("cuda_max_allocated_mib"),
        mem.get("cuda_max_reserved_mib"),
    )


# -- the gates: each returns (inputs, problems, detail when there are none) ------
def _data(s: _State) -> tuple[str, list[str], str]:
    if s.pilot.sequences:
        return _sequence_data(s)
    p, problems = s.pilot, []
    n_classes = p.classes
    for part, X, y in (("train", p.X_train, p.y_train), ("val", p.X_val, p.y_val)):
        problems += _inputs_problems(part, X)
        problems += _target_problems(part, X, y, n_classes)
    missing = sorted(set(range(n_classes)) - set(p.y_train.tolist()))
    if missing:
        problems.append(f"classes {missing[:10]} absent from training targets")
    overlap = _overlap(p.X_train, p.X_val)
    if overlap:
        problems.append(f"{overlap} validation rows also in training")
    problems += _mask_problems(p)
    if p.updates_per_epoch == 0:
        problems.append(
            f"{p.examples_per_update} examples per update exceed the "
            f"{len(p.y_train)} training examples"
        )
    inputs = f"train {tuple(p.X_train.shape)}, val {tuple(p.X_val.shape)}"
    masks = "mask/lengths consistent" if p.mask is not None or p.lengths is not None else "no masks"
    return (
        inputs,
        problems,
        (
            f"{n_classes} classes all present, targets in range, inputs "
            f"finite, 0 train/val overlaps, {masks}"
        ),
    )


def _sequence_data(s: _State) -> tuple[str, list[str], str]:
    """The data phase of a sequence pilot (see the module's docstring)."""
    p, problems = s.pilot, []
    for part, X, y in (("train", p.X_train, p.y_train), ("val", p.X_val, p.y_val)):
        problems += _inputs_problems(part, X)
        if tuple(y.shape) != tuple(X.shape[:2]):
            problems.append(f"{part} targets of shape {tuple(y.shape)}; expected {tuple(X.shape)}")
    if problems:
        return f"train {tuple(p.X_train.shape)}, val {tuple(p.X_val.shape)}", problems, ""
    counted = p.y_train != IGNORE_INDEX
    width = p.X_train.shape[1]
    real = _real_positions(p)
    lengths = real.sum(dim=1)
    bad = (p.y_train[counted] < 0) | (p.y_train[counted] >= p.classes)
    if bool(bad.any()):
        problems.append(f"{int(bad.sum())} counted targets outside 0..{p.classes - 1}")
    none = int((counted.sum(dim=1) == 0).sum())
    if none:
        problems.append(f"{none} of {len(p.y_train)} examples have no token counted in the loss")
    padded = ~real
    # Position t predicts token t + 1: a target counts on padding when t + 1 is padding.
    target_is_pad = torch.nn.functional.pad(padded[:, 1:], (0, 1), value=True)
    pad_counted = int((counted & target_is_pad).sum())
    if pad_counted:
        problems.append(
            f"padding counts in the loss: {pad_counted} counted targets are padding "
            f"({pad_counted / max(1, int(target_is_pad.sum())):.0%} of padding targets); expected "
            "-100 on every padded position"
        )
    if p.prompts is not None:
        # The prompt's last token predicts the answer's first: targets before it are prompt.
        before = torch.arange(width)[None, :] < (p.prompts[:, None] - 1)
        in_prompt = int((counted & before).sum())
        if in_prompt:
            problems.append(
                f"the prompt counts in the loss: {in_prompt} counted targets lie in prompts "
                f"({int((counted & before).any(dim=1).sum())} examples); expected -100 before "
                "each answer"
            )
    full = lengths >= width
    end = p.vocab.index("<eos>") if p.vocab and "<eos>" in p.vocab else None
    if end is not None:  # a row that fills the context without its end token was cut
        last = p.X_train[torch.arange(len(lengths)), (lengths - 1).clamp_min(0)]
        cut = int((full & (last != end)).sum())
        truncation = f"{cut} truncated (filling the context without <eos>)"
        if cut:
            problems.append(f"{cut} examples truncated at the context ({width}): answers cut")
    else:
        truncation = f"{int(full.sum())} fill the context (truncated if their answer did not fit)"
    s.values["examples"] = _decoded(p, counted, real)
    share = float(counted.sum()) / counted.numel()
    inputs = f"train {tuple(p.X_train.shape)}, val {tuple(p.X_val.shape)}"
    detail = (
        f"lengths {int(lengths.min())}-{int(lengths.max())} of {width} "
        f"(mean {float(lengths.float().mean()):.1f}); padding {float(padded.float().mean()):.0%} "
        f"of positions, none counted; {share:.0%} of targets counted, every example has some; "
        f"{truncation}"
    )
    return inputs, problems, detail


def _real_positions(p: Pilot) -> torch.Tensor:
    """Which input positions are real tokens: from the mask, the lengths or the pad id."""
    width = p.X_train.shape[1]
    if p.mask is not None:
        return p.mask.bool()
    if p.lengths is not None:
        return torch.arange(width)[None, :] < p.lengths[:, None]
    if p.pad_id is not None:
        return p.X_train != p.pad_id
    return torch.ones_like(p.X_train, dtype=torch.bool)


def _decoded(p: Pilot, counted: torch.Tensor, real: torch.Tensor) -> list[str]:
    """A few training examples, token by token: [target] where the loss counts it."""
    out = []
    for row in range(min(SHOWN_EXAMPLES, len(p.X_train))):
        ids = p.X_train[row].tolist()
        names = [p.vocab[i] if p.vocab and 0 <= i < len(p.vocab) else str(i) for i in ids]
        marked = list(names)
        for t in torch.nonzero(counted[row]).flatten().tolist():
            if t + 1 < len(marked):
                marked[t + 1] = f"[{names[t + 1]}]"
        pads = int((~real[row]).sum())
        shown = [m for m, r in zip(marked, real[row].tolist()) if r or m.startswith("[")]
        length = int(real[row].sum())
        prompt = f", prompt {int(p.prompts[row])}" if p.prompts is not None else ""
        out.append(f"{' '.join(shown)}  (length {length}{prompt}, padding {pads})")
    return out


def _inputs_problems(part: str, X: torch.Tensor) -> list[str]:
    if X.is_floating_point():
        bad = int((~torch.isfinite(X)).sum())
        return [f"{part} inputs: {bad} non-finite values"] if bad else []
    if X.dtype.is_complex or X.dtype == torch.bool:
        return [f"{part} inputs have dtype {X.dtype}; expected float features or integer ids"]
    low = int(X.min()) if X.numel() else 0
    return [f"{part} ids: negative id {low}"] if low < 0 else []


def _target_problems(part: str, X: torch.Tensor, y: torch.Tensor, n_classes: int) -> list[str]:
    if y.dtype.is_floating_point or y.dtype == torch.bool or y.dim() != 1:
        return [
            f"{part} targets: dtype {y.dtype}, shape {tuple(y.shape)}; expected 1-D int classes"
        ]
    out = []
    if len(y) != len(X):
        out.append(f"{part}: {len(X)} inputs but {len(y)} targets")
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= n_classes:
        out.append(f"{part} targets span {low}..{high}; expected 0..{n_classes - 1}")
    return out


def _overlap(X_train: torch.Tensor, X_val: torch.Tensor) -> int:
    # Exact duplicate rows: a leak that inflates validation scores.
    seen = {row.tobytes() for row in X_train.reshape(len(X_train), -1).cpu().numpy()}
    return sum(row.tobytes() in seen for row in X_val.reshape(len(X_val), -1).cpu().numpy())


def _mask_problems(p: Pilot) -> list[str]:
    out = []
    if p.mask is not None:
        if tuple(p.mask.shape) != tuple(p.X_train.shape[:2]):
            return [f"mask shape {tuple(p.mask.shape)}; expected {tuple(p.X_train.shape[:2])}"]
        if not bool(((p.mask == 0) | (p.mask == 1)).all()):
            out.append("mask has values other than 0 and 1")
        empty = int((p.mask.sum(dim=1) == 0).sum())
        if empty:
            out.append(f"{empty} examples with an all-zero mask")
    if p.lengths is not None:
        width = p.X_train.shape[1] if p.X_train.dim() > 1 else 1
        if int(p.lengths.min()) < 1 or int(p.lengths.max()) > width:
            out.append(
                f"lengths span {int(p.lengths.min())}..{int(p.lengths.max())}; expected 1..{width}"
            )
        elif p.mask is not None and not torch.equal(p.mask.sum(dim=1).long(), p.lengths.long()):
            out.append("lengths disagree with the mask's row sums")
    return out


def _next_batch(s: _State) -> torch.Tensor:
    return torch.randperm(len(s.pilot.y_train), generator=s.sampler)[: s.pilot.batch_size]


def _forward_loss(s: _State) -> tuple[str, list[str], str]:
    idx = _next_batch(s)
    xb, yb = s.pilot.X_train[idx].to(s.device), s.pilot.y_train[idx].to(s.device)
    out = s.model(xb)
    loss = s.pilot.loss_fn(out, yb)
    s.values.update(loss=loss)
    n_classes, problems = s.pilot.classes, []
    expected = (*tuple(yb.shape), n_classes)  # a class per row, or a token per position
    if tuple(out.shape) != expected:
        problems.append(f"output shape {tuple(out.shape)}; expected {expected}")
    elif bool((out >= 0).all()) and torch.allclose(
        out.sum(dim=-1), torch.ones(out.shape[:-1], device=out.device), atol=1e-4
    ):
        problems.append("outputs are probabilities (rows sum to 1); the loss expects logits")
    value, ln_c = float(loss.detach()), math.log(n_classes)
    if not math.isfinite(value):
        problems.append(f"loss is {value}")
    elif not FIRST_LOSS_BAND[0] <= value / ln_c <= FIRST_LOSS_BAND[1]:
        problems.append(
            f"first loss {value:.4g} is {value / ln_c:.3g} x ln C ({ln_c:.3f}); "
            f"expected {FIRST_LOSS_BAND[0]:.2f}..{FIRST_LOSS_BAND[1]:.2f} x"
        )
    inputs = f"batch {tuple(xb.shape)} -> {tuple(out.shape)}"
    return inputs, problems, f"loss {value:.4f} vs ln C {ln_c:.4f}, shapes as expected"


def _backward(s: _State) -> tuple[str, list[str], str]:
    s.optimizer.zero_grad(set_to_none=True)
    s.values["loss"].backward()
    params = [(n, p) for n, p in s.model.named_parameters() if p.requires_grad]
    problems, silent_on = [], _silent_units(s, params)
    for name, p in params:
        if p.grad is None:
            problems.append(f"{name}: no gradient")
        elif not bool(torch.isfinite(p.grad).all()):
            problems.append(f"{name}: non-finite gradient")
        elif name in silent_on:
            problems.append(f"{name}: {silent_on[name]}/{p.shape[0]} units without gradient")
    count = sum(p.numel() for _, p in params)
    return (
        f"{count} trainable weights in {len(params)} tensors",
        problems,
        "every trainable unit got a finite, non-zero gradient",
    )


def _silent_units(s: _State, params: list[tuple[str, nn.Parameter]]) -> dict[str, int]:
    """Units (matrix rows, vector entries) with exactly zero gradient on many examples.

    A dead ReLU or a detached branch never gets a gradient; a healthy unit can
    miss one small microbatch by chance, so a unit silent on the step's batch is
    re-checked on up to SILENT_CHECK_EXAMPLES examples before it counts.
    """

    # An embedding's rows are tokens and positions, not units: a token absent from the
    # examples (or the last position, which no counted target reads) gets no gradient by design.
    lookups = {
        f"{module_name}.{n}" if module_name else n
        for module_name, module in s.model.named_modules()
        if isinstance(module, nn.Embedding)
        for n, _ in module.named_parameters(recurse=False)
    }

    def silent(grads: list[torch.Tensor | None]) -> dict[str, torch.Tensor]:
        return {
            name: (g.reshape(g.shape[0], -1).abs().sum(dim=1) == 0)
            for (name, _), g in zip(params, grads, strict=True)
            if g is not None and g.dim() > 0 and name not in lookups
        }

    found = {k: v for k, v in silent([p.grad for _, p in params]).items() if bool(v.any())}
    if not found:
        return {}
    n = min(len(s.pilot.y_train), SILENT_CHECK_EXAMPLES)
    X, y = s.pilot.X_train[:n].to(s.device), s.pilot.y_train[:n].to(s.device)
    loss = s.pilot.loss_fn(s.model(X), y)
    grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
    wide = silent(list(grads))
    return {k: int((v & wide[k]).sum()) for k, v in found.items() if bool((v & wide[k]).any())}


def _update(s: _State) -> tuple[str, list[str], str]:
    targeted = [(n, p) for n, p in s.model.named_parameters() if p.requires_grad]
    before = [p.detach().clone() for _, p in targeted]
    s.optimizer.step()
    s.step += 1
    in_optimizer = {id(p) for g in s.optimizer.param_groups for p in g["params"]}
    problems, ratios = [], []
    for (name, p), old in zip(targeted, before, strict=True):
        if torch.equal(p.detach(), old):
            why = "" if id(p) in in_optimizer else " (not in the optimizer)"
            problems.append(f"{name} did not change{why}")
        ratios.append(float((p.detach() - old).norm() / old.norm().clamp_min(1e-12)))
    if s.steps_counted != s.step:
        problems.append(f"optimizer counted {s.steps_counted} steps; expected {s.step}")
    return (
        f"{len(targeted)} targeted tensors",
        problems,
        f"all changed; step {s.step} counted; max |update|/|w| {max(ratios, default=0):.2e}",
    )


@torch.no_grad()
def _validation(s: _State) -> tuple[str, list[str], str]:
    p, model = s.pilot, s.model
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()
    problems = (
        [] if not any(m.training for m in model.modules()) else ["eval() left modules training"]
    )
    outs = [
        model(p.X_val[i : i + p.batch_size].to(s.device))
        for i in range(0, len(p.y_val), p.batch_size)
    ]
    model.train()
    out = torch.cat(outs) if outs else torch.empty(0)
    expected = (*tuple(p.y_val.shape), p.classes)
    if tuple(out.shape) != expected:
        problems.append(f"outputs {tuple(out.shape)}; expected {expected}")
    elif not bool(torch.isfinite(out).all()):
        problems.append("non-finite validation outputs")
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, snapshot[k])]
    if changed:
        problems.append(f"evaluation changed {changed[:3]} (not in eval mode?)")
    acc = accuracy(out.cpu(), p.y_val) if not problems else 0.0
    return (
        f"val {tuple(p.X_val.shape)}",
        problems,
        f"eval mode, {len(out)}/{len(p.y_val)} outputs, all finite; val acc {acc:.3f}",
    )


def _resume(s: _State) -> tuple[str, list[str], str]:
    lr = float(s.optimizer.param_groups[0]["lr"])
    checkpoint = {
        "model": s.model.state_dict(),
        "optimizer": s.optimizer.state_dict(),
        "step": s.step,
        "rng": {"torch": torch.get_rng_state(), "sampler": s.sampler.get_state()},
    }
    with tempfile.TemporaryDirectory(prefix="faultbench-preflight-") as tmp:
        path = Path(tmp) / "checkpoint.pt"
        torch.save(checkpoint, path)
        break_checkpoint(path, checkpoint, s.values.get("break"))
        size = path.stat().st_size
        expected = {
            "step": s.step,
            "lr": lr,
            "next_batch": _next_batch(s).tolist(),
            "torch_draw": float(torch.rand(1)),
            "sums": weight_sums(s.model.state_dict()),
            "optimizer_states": len(s.optimizer.state_dict()["state"]),
        }
        got = reload_elsewhere(path, len(s.pilot.y_train), s.pilot.batch_size)
    problems = [got["error"]] if "error" in got else compare_reload(expected, got)
    return (
        f"checkpoint {size / 1024:.1f} KiB",
        problems,
        f"reloaded in a new process (weights_only): step {s.step}, lr {lr:g}, "
        "next batch, RNG and weights match",
    )


_GATES = (_data, _forward_loss, _backward, _update, _validation, _resume)
