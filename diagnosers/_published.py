"""What the ports of the published diagnosers share: epochs, model internals, answers.

The four ports (:mod:`~faultbench.diagnosers.autotrainer`,
:mod:`~faultbench.diagnosers.deepdiagnosis`, :mod:`~faultbench.diagnosers.umlaut`,
:mod:`~faultbench.diagnosers.thedeepchecker`) were written for Keras or TensorFlow
callbacks that run once per epoch. They read a faultbench run the same way:

* **An epoch** ends at each of the loop's periodic evaluations (about ten per run,
  every 60 of 600 steps, about 1.3 passes over digits). Its training loss is the mean
  of its steps' losses, as Keras's running ``loss`` is; its accuracies and validation
  loss are the evaluation's.
* **The model's internals** (first-batch gradients, layer outputs, weights) come from
  the run's probe, which rebuilds the model *as initialized*: what a tool reads
  during training at a later epoch is read here before any update.
* **Fields a newer monitor records** (per-module output and gradient statistics over
  time) are read when the trace has them; a rule that needs one skips cleanly and
  says so in the evidence under ``missing``.

Every answer names the rule that decided it (``evidence["rule"]``) and every rule
that fired (``evidence["fired"]``), so that a benchmark can count which rules ever fire.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from faultbench.faults.fault import labels
from faultbench.scoring.diagnosis import UNKNOWN, Diagnosis, finite_or_none
from faultbench.scoring.run import Probe, Run, output_tensor
from faultbench.storage.runner import one_thread  # noqa: F401  (the ports' one-thread probe)
from faultbench.training.trace import Trace

OTHER_FAULT = "other_fault"  # "something is broken, and none of the nine" (issue 18's label)
HEALTHY = "healthy"
NO_SYMPTOM = "no symptom"  # every port's table maps this to healthy

# -- findings and answers --------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one run."""

    fired: bool  # whether the rule's condition held
    evidence: dict[str, Any] = field(default_factory=dict)  # the numbers it compared


def label_accepted(label: str) -> bool:
    """Whether ``label`` is an answer faultbench scores (healthy, a known fault,
    ``other_fault``, ``unknown``); a port answers ``unknown`` for anything else and
    keeps its table's label in the evidence."""
    return label in (*labels(), UNKNOWN)


def answer(
    table: Mapping[str, str],
    symptom: str,
    *,
    rule: str,
    fired: Sequence[str],
    evidence: Mapping[str, Any],
    missing: Sequence[str] = (),
) -> Diagnosis:
    """The port's answer: ``table[symptom]``, with the evidence that decided it.

    Args:
        table: The port's symptom -> faultbench label table.
        symptom: The symptom the tool reported (``NO_SYMPTOM`` when none).
        rule: The rule that decided.
        fired: Every rule whose condition held, in the order they were checked.
        evidence: The numbers the rules compared.
        missing: Signals a rule needed and the run did not have.
    """
    label = table[symptom]
    given = label if label_accepted(label) else UNKNOWN
    return Diagnosis(
        given,
        confidence=None,
        evidence=clean(
            {
                "rule": rule,
                "symptom": symptom,
                "table_label": label,
                "fired": list(dict.fromkeys(fired)),
                "missing": sorted(set(missing)),
                **evidence,
            }
        ),
    )


def clean(value: Any) -> Any:
    """``value`` made JSON-clean: non-finite floats become None, arrays lists."""
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return clean(value.tolist())
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return finite_or_none(float(value))
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


# -- epochs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Epochs:
    """A run's history as a Keras ``History``: one entry per epoch."""

    end_step: np.ndarray  # the step after which the epoch's evaluation ran (1-based)
    loss: np.ndarray  # mean training loss of the epoch's steps (nan if any was nan)
    acc: np.ndarray  # training accuracy at the epoch's evaluation
    val_loss: np.ndarray  # validation loss at the evaluation
    val_acc: np.ndarray  # validation accuracy at the evaluation

    def __len__(self) -> int:
        return len(self.end_step)

    def upto(self, epoch: int) -> Epochs:
        """The history as it stood at the end of ``epoch`` (0-based)."""
        stop = epoch + 1
        return Epochs(
            self.end_step[:stop],
            self.loss[:stop],
            self.acc[:stop],
            self.val_loss[:stop],
            self.val_acc[:stop],
        )


def epochs(trace: Trace) -> Epochs:
    """Cut the trace into epochs at its evaluations."""
    ends = np.asarray(trace.eval_steps, dtype=np.int64)
    starts = np.concatenate([[0], ends[:-1]]) if len(ends) else ends
    loss = np.array(
        [np.mean(trace.loss[s:e]) if e > s else math.nan for s, e in zip(starts, ends)],
        dtype=np.float64,
    )
    return Epochs(ends, loss, trace.train_acc, trace.val_loss, trace.val_acc)


def steps_between(trace: Trace, after: int, upto: int) -> slice:
    """The per-step indices of the updates after step ``after`` up to step ``upto``."""
    return slice(max(0, after), min(trace.steps, upto))


# -- the per-module statistics the monitor records -----------------------------------

#: A port's name for an activation module's per-step statistic -> the trace field holding it
#: (module path -> one value per recorded step; see faultbench.training.trace.Trace).
ACTIVATION_STATS = {
    "mean_abs": "activation_mean_abs",
    "nonpositive_share": "nonpositive_share",
    "saturated_share": "saturated_share",
}
GRAD_MEAN_ABS = "grad_mean_abs"  # parameterized module path -> mean |gradient| per recorded step


def module_stat(trace: Trace, field: str, module: str) -> np.ndarray | None:
    """The per-recorded-step series of ``module`` in the trace's ``field``, None without one."""
    values = getattr(trace, field, None)
    if not isinstance(values, Mapping) or module not in values:
        return None
    return np.asarray(values[module], dtype=np.float64)


def recorded_steps(trace: Trace, entries: int) -> np.ndarray:
    """The step (1-based) after which each of a per-recorded-step series' ``entries`` was
    recorded: the trace's ``stat_steps`` (every ``Monitor(every=k)``-th step), never an
    assumed one entry per step."""
    steps = np.asarray(trace.stat_steps, dtype=np.int64) + 1
    return steps if len(steps) == entries else np.arange(1, entries + 1)


def value_at(trace: Trace, series: np.ndarray, step: int) -> float:
    """The entry of ``series`` recorded at ``step`` or the last one before it (nan if none)."""
    at = recorded_steps(trace, len(series))
    index = int(np.searchsorted(at, step, side="right")) - 1
    return float(series[index]) if 0 <= index < len(series) else math.nan


def recorded_between(trace: Trace, series: np.ndarray, after: int, upto: int) -> np.ndarray:
    """The entries of ``series`` recorded after step ``after`` up to step ``upto``."""
    at = recorded_steps(trace, len(series))
    return np.asarray(series)[(at > after) & (at <= upto)]


# -- the probe's model ------------------------------------------------------------------

RELU_FAMILY = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU)
SATURATING = (nn.Sigmoid, nn.Tanh)
WEIGHTED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)  # Keras's Dense and Conv layers


def leaves(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules without children, in registration (for Sequential: forward) order."""
    return [(name, m) for name, m in model.named_modules() if not list(m.children())]


def is_activation(module: nn.Module) -> bool:
    """A torch activation module (ReLU, Sigmoid, Softmax, ...): PyTorch's Keras activations."""
    return type(module).__module__ == "torch.nn.modules.activation"


def is_softmax(name: str, module: nn.Module) -> bool:
    """A softmax module, by type or by name (Keras tools look for 'softmax' in a name)."""
    return "softmax" in type(module).__name__.lower() or "softmax" in name.lower()


def activation_kind(model: nn.Module) -> str:
    """The model's activation as TheDeepChecker's ``act_fn_name``: relu, tanh, sigmoid or ''."""
    found = [m for _, m in leaves(model)]
    if any(isinstance(m, RELU_FAMILY) for m in found):
        return "relu"
    if any(isinstance(m, nn.Tanh) for m in found):
        return "tanh"
    return "sigmoid" if any(isinstance(m, nn.Sigmoid) for m in found) else ""


def first_tensor(output: Any) -> torch.Tensor | None:
    """A module's output tensor (the first one of a tuple, as a GRU returns)."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        return next((o for o in output if isinstance(o, torch.Tensor)), None)
    return None


def forward_with_outputs(
    model: nn.Module, X: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The model's output tensor on ``X`` (a ``ModelOutput``'s logits: the probe's
    :func:`~faultbench.scoring.run.output_tensor`) and every leaf module's output, in leaf
    order.

    The outputs keep their autograd graph, so a loss on the result can be backpropagated.
    """
    seen: dict[str, torch.Tensor] = {}
    handles = []
    for name, module in leaves(model):

        def keep(_m: nn.Module, _i: Any, out: Any, name: str = name) -> None:
            tensor = first_tensor(out)
            if tensor is not None:
                seen[name] = tensor

        handles.append(module.register_forward_hook(keep))
    try:
        out = output_tensor(model(X))
    finally:
        for handle in handles:
            handle.remove()
    return out, seen


@dataclass(frozen=True)
class FirstBatch:
    """The untrained model on the first training batch: its outputs, gradients, weights."""

    model: nn.Module  # the model as the run initialized it
    loss: float  # the run's loss on the batch
    output: np.ndarray  # the model's output, one row per example
    outputs: dict[str, np.ndarray]  # each leaf module's output
    grads: dict[str, np.ndarray]  # parameter name -> its gradient (zeros where none flowed)
    params: dict[str, np.ndarray]  # parameter name -> its value


def first_batch(probe: Probe, batch_size: int) -> FirstBatch:
    """One forward and backward pass of the initialized model on the first batch.

    Costs one probe step. The batch is the first ``batch_size`` training examples
    (AUTOTRAINER's and DeepDiagnosis's ``trainX[0:batch_size]``).
    """
    torch.manual_seed(0)
    model = probe.make_model()
    model.train()
    X, y = probe.train_data(max(1, batch_size))
    out, outputs = forward_with_outputs(model, X)
    loss = probe.loss(out, y)
    model.zero_grad(set_to_none=False)
    loss.backward()
    named = list(model.named_parameters())
    return FirstBatch(
        model=model,
        loss=float(loss.detach()),
        output=_numpy(out),
        outputs={k: _numpy(v) for k, v in outputs.items()},
        grads={
            k: _numpy(p.grad) if p.grad is not None else np.zeros(tuple(p.shape)) for k, p in named
        },
        params={k: _numpy(p) for k, p in named},
    )


def weighted_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The Linear and convolution leaves (Keras's Dense and Conv layers), input side first."""
    return [(name, m) for name, m in leaves(model) if isinstance(m, WEIGHTED)]


def make_optimizer(run: Run, params: Sequence[torch.nn.Parameter]) -> torch.optim.Optimizer | None:
    """The run's optimizer, rebuilt from its observable configuration (None if unknown).

    The published tools train with the user's own optimizer; the configuration
    names its class and learning rate (its other settings are taken as defaults).
    """
    cls = getattr(torch.optim, run.config.optimizer, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        return None
    optimizer: torch.optim.Optimizer = cls(params, lr=run.config.lr)  # type: ignore[call-arg]
    return optimizer


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return np.asarray(tensor.detach().double().cpu().numpy())
