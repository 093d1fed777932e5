"""The run recipe: a training script cut into the parts where bugs live.

A run is built from parts, each where a user's script has it::

    X_train, y_train, X_val, y_val        the data
    model = make_model(recipe)             the model (after the seed is set)
    groups = param_groups(model, recipe)   what the optimizer updates, with which settings
    optimizer = make_optimizer(groups, recipe)
    schedule = make_schedule(optimizer, recipe)
    for xb, yb in loader(recipe):          the loader (the design's: tensors, a DataLoader, ...)
        loss = loss_fn(model(xb), yb)      the loss
        clear(model, optimizer, step)      the step: gradients cleared,
        loss.backward()                    computed,
        clip(model, optimizer, step)       clipped
        update(model, optimizer, step)     and applied
        schedule.step()                    the rate moves on
    score = make_scorer(recipe)            the evaluation, at a few steps:
    model.eval(); score(model)             accuracies and validation loss

A sequence task's recipe (``sequences`` set: token rows, labels with ignored
positions) has the same parts: a transformer, the token loss and greedy
decoding for its evaluation (:mod:`faultbench.faults.tokens`).

A recipe's :class:`~faultbench.tasks.design.Design` holds the choices a
practitioner made (network, optimizer and rate, batch size, schedule,
clipping, weight decay): the task's reference one, or one drawn from the
task's family (:mod:`faultbench.faults.family`).

:func:`base_setup` gives a task's healthy recipe. A fault returns a copy with
one or more parts wrapped or replaced (see :mod:`faultbench.faults.fault`), so
the loop that runs a recipe (``faultbench.training.loop``) never names a fault.
The loss also reaches diagnosers, through the probe: it stays a function of
module level (``F.cross_entropy``, ``F.nll_loss``), so that a probe pickles.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import lr_scheduler
from torch.optim.lr_scheduler import LRScheduler

from faultbench.faults.architectures import build
from faultbench.faults.batches import Batch, batches
from faultbench.faults.batches import BatchStream as BatchStream  # where tools import it from
from faultbench.faults.tokens import sequence_scorer, token_cross_entropy
from faultbench.tasks.design import Design, Network
from faultbench.tasks.kinds import MULTICLASS, Kind
from faultbench.tasks.sequences import Sequences
from faultbench.tasks.task import Task

ModelFactory = Callable[["Recipe"], nn.Module]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
GroupsFactory = Callable[[nn.Module, "Recipe"], list[dict[str, Any]]]
OptimizerFactory = Callable[[list[dict[str, Any]], "Recipe"], torch.optim.Optimizer]
LoaderFactory = Callable[["Recipe"], Iterator[Batch]]
StepPart = Callable[[nn.Module, torch.optim.Optimizer, int], None]


class Schedule(Protocol):
    """What the loop asks of a schedule: a step after each update (torch's LRScheduler)."""

    def step(self) -> None: ...


class Scorer(Protocol):
    """An evaluation: scores a model (in eval mode) on the run's data."""

    def __call__(self, model: nn.Module) -> dict[str, float]: ...


ScheduleFactory = Callable[[torch.optim.Optimizer, "Recipe"], Schedule]
ScorerFactory = Callable[["Recipe"], Scorer]
TRAIN_EVAL_SAMPLE = 512  # training examples a classifier's evaluation scores


WARMUP_SHARE = 0.1  # share of the run a warm-up schedule spends reaching its peak
ONE_CYCLE_RISE = 0.3  # share of the run a one-cycle schedule spends rising (torch's default)


def standard_model(recipe: Recipe) -> nn.Module:
    """The design's network (see :mod:`faultbench.faults.architectures`)."""
    return build(
        recipe.network,
        n_features=recipe.X_train.shape[1],
        n_outputs=recipe.n_outputs,
        image_side=recipe.image_side,
        code_sizes=recipe.code_sizes,
    )


def call(model: nn.Module, inputs: Any) -> Any:
    """``model`` on a batch's inputs as a loader yields them: a tensor, a tuple of tensors
    (``model(*inputs)``: a model of several inputs) or a dict (``model(**inputs)``)."""
    if isinstance(inputs, tuple):
        return model(*inputs)
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(inputs)


def inputs_of(recipe: Recipe, X: np.ndarray | torch.Tensor, codes: Any = None) -> Any:
    """The model's inputs for rows ``X`` (and their ``codes``): ``X`` as a tensor, or
    ``(codes, X)`` for a model of two inputs."""
    x = torch.as_tensor(X)
    if recipe.code_sizes and codes is not None:
        return (torch.as_tensor(codes), x)
    return x


def rows(inputs: Any, index: Any) -> Any:
    """The rows ``index`` of every tensor in a batch's inputs (tensor, tuple or dict)."""
    if isinstance(inputs, tuple):
        return tuple(rows(part, index) for part in inputs)
    if isinstance(inputs, dict):
        return {k: rows(v, index) for k, v in inputs.items()}
    return inputs[index]


def all_parameters(model: nn.Module, recipe: Recipe) -> list[dict[str, Any]]:
    """One parameter group holding every parameter, with the optimizer's defaults."""
    return [{"params": list(model.parameters())}]


def named_optimizer(groups: list[dict[str, Any]], recipe: Recipe) -> torch.optim.Optimizer:
    """The design's optimizer at its rate and weight decay."""
    d = recipe.design
    if d.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=d.lr, momentum=d.momentum, weight_decay=d.weight_decay)
    kind = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "rmsprop": torch.optim.RMSprop}
    return kind[d.optimizer](groups, lr=d.lr, weight_decay=d.weight_decay)


def warmup_then_cosine(step: int, *, warm: int, total: int) -> float:
    """The rate's factor for update ``step`` (counted from 0, as ``LambdaLR`` asks): a linear
    warm-up to 1 over ``warm`` updates, then a cosine decay to 0 at ``total``."""
    done = step + 1
    if done <= warm:
        return done / warm
    return 0.5 * (1.0 + math.cos(math.pi * (done - warm) / max(1, total - warm)))


def designed_schedule(optimizer: torch.optim.Optimizer, recipe: Recipe) -> LRScheduler:
    """The design's schedule of the rate, from torch's schedulers, stepped after each update."""
    total, name = recipe.steps, recipe.design.schedule
    if name == "cosine":
        return lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)
    if name == "one_cycle":
        return lr_scheduler.OneCycleLR(
            optimizer, max_lr=recipe.design.lr, total_steps=total, pct_start=ONE_CYCLE_RISE
        )
    if name == "warmup_decay":
        warm = max(1, round(WARMUP_SHARE * total))
        return lr_scheduler.LambdaLR(
            optimizer, functools.partial(warmup_then_cosine, warm=warm, total=total)
        )
    return lr_scheduler.LambdaLR(optimizer, _constant_rate)


def _constant_rate(step: int) -> float:
    return 1.0


def shuffled_batches(recipe: Recipe) -> Iterator[Batch]:
    """Endless mini-batches, reshuffled every epoch, from the design's loader (ready tensors,
    a ``DataLoader``, a ``Dataset`` with per-item work, with a worker or without:
    :mod:`faultbench.faults.batches`)."""
    return batches(
        recipe.design.loader,
        recipe.X_train,
        recipe.y_train,
        batch_size=recipe.batch_size,
        seed=recipe.seed,
        codes=recipe.codes_train,
    )


def zero_gradients(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """``zero_grad`` before each backward pass.

    The model's, so that layers left out of the optimizer are cleared too.
    """
    model.zero_grad()


def no_clipping(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """A design without clipping clips nothing."""


def optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """``optimizer.step()``."""
    optimizer.step()


def class_scorer(recipe: Recipe) -> Scorer:
    """The kind's evaluation: a classifier's argmax accuracy on a training sample and on
    validation; another kind's metrics (:meth:`faultbench.tasks.kinds.Kind.evaluate`)."""
    if recipe.kind.name == "multiclass":
        return ClassScorer(recipe)
    return KindScorer(recipe)


@dataclass(frozen=True, eq=False)
class Recipe:
    """Everything one training run is made of; faults return modified copies."""

    seed: int  # seeds the model init, the batch order, dropout and any fault's randomness
    n_outputs: int  # the model's outputs: classes, one logit, labels or targets
    X_train: np.ndarray  # inputs the loop trains on
    y_train: np.ndarray  # targets the loop trains on (the task kind's)
    X_val: np.ndarray  # inputs the run validates on
    y_val: np.ndarray  # targets the run validates on
    design: Design  # the healthy choices: network, optimizer and rate, batch, schedule, ...
    image_side: int  # side of the square images a "cnn" reads
    steps: int  # optimizer updates
    make_model: ModelFactory = standard_model  # builds the model once the seed is set
    loss: LossFn = F.cross_entropy  # loss(output, target), what backward starts from
    param_groups: GroupsFactory = all_parameters  # the optimizer's parameter groups
    make_optimizer: OptimizerFactory = named_optimizer  # builds the optimizer from the groups
    make_schedule: ScheduleFactory = designed_schedule  # the rate over the run, stepped per update
    loader: LoaderFactory = shuffled_batches  # the endless stream of training batches
    clear: StepPart = zero_gradients  # before backward: where zero_grad lives
    clip: StepPart = no_clipping  # between backward and the update: where clipping lives
    update: StepPart = optimizer_step  # applies the gradients: where optimizer.step() lives
    make_scorer: ScorerFactory = class_scorer  # the evaluation: accuracies and validation loss
    inapplicable: Mapping[str, str] = field(default_factory=dict)  # fault -> why it cannot apply
    sequences: Sequences | None = None  # a sequence task's prompts, lengths and units
    kind: Kind = MULTICLASS  # what the task predicts
    codes_train: np.ndarray | None = None  # a second input of categorical codes; else None
    codes_val: np.ndarray | None = None  # the validation rows' codes
    code_sizes: tuple[int, ...] = ()  # distinct values of each code column

    @property
    def network(self) -> Network:
        """The design's model."""
        return self.design.network

    @property
    def architecture(self) -> str:
        """ "mlp", "cnn", "gru" or "transformer"."""
        return self.design.network.architecture

    @property
    def lr(self) -> float:
        """The design's learning rate (a schedule's peak)."""
        return self.design.lr

    @property
    def batch_size(self) -> int:
        """Examples per update."""
        return self.design.batch_size

    @property
    def optimizer(self) -> str:
        """The design's optimizer: adam, adamw, sgd or rmsprop."""
        return self.design.optimizer

    @property
    def hidden(self) -> int:
        """Width of the last hidden layer (the one called ``hidden``)."""
        return self.design.network.widths[-1]

    def replace(self, **changes: Any) -> Recipe:
        """A copy with some fields changed.

        A design's choice can be changed by its name, as a field of the recipe:
        ``replace(lr=...)``, ``replace(batch_size=...)``, ``replace(widths=...)``,
        ``replace(hidden=...)`` (the last hidden layer's width): a fault wraps the
        drawn design without rebuilding it.
        """
        design, network = {}, {}
        for name in list(changes):
            if name in _DESIGN_FIELDS:
                design[name] = changes.pop(name)
            elif name in _NETWORK_FIELDS:
                network[name] = changes.pop(name)
        if "hidden" in changes:
            network["widths"] = (*self.network.widths[:-1], int(changes.pop("hidden")))
        if design or network:
            changes["design"] = self.design.replace(**design).with_network(**network)
        return dataclasses.replace(self, **changes)

    def rng(self, purpose: str) -> np.random.Generator:
        """A generator seeded from the run's seed and ``purpose``: a fault's randomness is
        the same in every run of that seed, and independent of every other use."""
        return np.random.Generator(np.random.PCG64([self.seed, zlib.crc32(purpose.encode())]))

    def pick_hidden(self, purpose: str) -> str:
        """One of the network's hidden layers, the same for every run of this seed and design:
        where a fault of one layer (frozen, dead, narrow) strikes."""
        names = self.network.hidden_names
        return names[int(self.rng(purpose).integers(len(names)))]


# A design's choices a fault may change by name through Recipe.replace; a recipe's own
# field of the same name (``clip``, the step part) is the recipe's.
_OWN_FIELDS = {f.name for f in dataclasses.fields(Recipe)}
_DESIGN_FIELDS = {f.name for f in dataclasses.fields(Design)} - {"network", "attempt"} - _OWN_FIELDS
_NETWORK_FIELDS = {f.name for f in dataclasses.fields(Network)} - {"architecture"} - _OWN_FIELDS


def base_setup(task: Task, seed: int, design: Design | None = None) -> Recipe:
    """The healthy recipe of ``task`` for one seed: ``design``, or the task's reference one."""
    d = task.defaults
    design = design or task.reference_design()
    clip = _clipper(design.clip) if design.clip > 0 else no_clipping
    if task.sequences is not None:
        tokens: dict[str, Any] = {"loss": token_cross_entropy, "make_scorer": sequence_scorer}
    else:
        tokens = {"loss": task.kind.loss()}
    return Recipe(
        seed=seed,
        n_outputs=task.n_outputs,
        X_train=task.X_train,
        y_train=task.y_train,
        X_val=task.X_val,
        y_val=task.y_val,
        design=design,
        image_side=d.image_side,
        steps=d.steps,
        clip=clip,
        inapplicable=task.inapplicable,
        sequences=task.sequences,
        kind=task.kind,
        codes_train=task.codes_train,
        codes_val=task.codes_val,
        code_sizes=task.code_sizes,
        **tokens,
    )


def _clipper(max_norm: float) -> StepPart:
    """``clip_grad_norm_(model.parameters(), max_norm)`` after each backward."""

    def clip_gradients(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    return clip_gradients


def steps_per_epoch(recipe: Recipe) -> int:
    """Full batches in one pass over the training data (what the loader yields per epoch)."""
    return max(1, len(recipe.y_train) // min(recipe.batch_size, len(recipe.y_train)))


class ClassScorer:
    """A classifier's evaluation, with its data prepared once instead of at every call.

    The training sample and the validation set go through the model in one
    forward pass: the benchmark's model is small, so the fixed cost of each
    call is a large part of the evaluation's cost.
    """

    def __init__(self, recipe: Recipe) -> None:
        n = min(TRAIN_EVAL_SAMPLE, len(recipe.y_train))
        self.n_train, self.n_val = n, len(recipe.y_val)
        self.X = torch.from_numpy(np.concatenate([recipe.X_train[:n], recipe.X_val]))
        self.y = np.concatenate([recipe.y_train[:n], recipe.y_val])
        self.y_val = torch.from_numpy(self.y[n:])

    @torch.inference_mode()
    def __call__(self, model: nn.Module) -> dict[str, float]:
        """Score ``model`` as it is (put it in eval mode first)."""
        logits = model(self.X)
        # numpy's argmax: the same indices as torch's (first maximum, NaN
        # first), at a third of the cost on a few hundred rows of ten classes.
        hits = logits.numpy().argmax(axis=1) == self.y
        n = self.n_train
        return {
            "train_acc": int(np.count_nonzero(hits[:n])) / n,
            "val_acc": int(np.count_nonzero(hits[n:])) / self.n_val if self.n_val else float("nan"),
            # Classes along dim 1 of a (1, classes, examples) view: the same
            # loss (to the last bit, nearly always), but torch's CPU log-softmax is
            # several times faster over a strided dim than over a short last one.
            "val_loss": float(F.cross_entropy(logits.t()[None, :, n:], self.y_val[None])),
        }


class KindScorer:
    """The evaluation of a task of another kind than classes: every metric of the kind
    (:meth:`faultbench.tasks.kinds.Kind.evaluate`) on a training sample and on validation,
    and the kind's loss on validation; the training sample and the validation set in one
    forward pass, as :class:`ClassScorer` does."""

    def __init__(self, recipe: Recipe) -> None:
        n = min(TRAIN_EVAL_SAMPLE, len(recipe.y_train))
        self.n = n
        self.kind = recipe.kind
        self.loss = recipe.kind.loss()
        X = np.concatenate([recipe.X_train[:n], recipe.X_val])
        codes = None
        if recipe.codes_train is not None and recipe.codes_val is not None:
            codes = np.concatenate([recipe.codes_train[:n], recipe.codes_val])
        self.inputs = inputs_of(recipe, X, codes)
        self.y = np.concatenate([recipe.y_train[:n], recipe.y_val])
        self.y_val = torch.from_numpy(self.y[n:])

    @torch.inference_mode()
    def __call__(self, model: nn.Module) -> dict[str, float]:
        """Score ``model`` as it is (put it in eval mode first)."""
        out = call(model, self.inputs)
        values = out.numpy()
        n, score = self.n, self.kind.score
        scores = {f"train_{score}": self.kind.evaluate(values[:n], self.y[:n])[score]}
        for name, value in self.kind.evaluate(values[n:], self.y[n:]).items():
            scores[f"val_{name}"] = value
        scores["val_loss"] = float(self.loss(out[n:], self.y_val))
        return scores
