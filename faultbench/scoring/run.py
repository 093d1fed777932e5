"""What a diagnoser is handed: a run's trace, its configuration and a probe.

The injected condition is deliberately absent from everything here. A
``Run`` is built from a stored record by copying out the trace and the
configuration only, and the probe is rebuilt from the recipe's *results*
(initialized model, its loss, training arrays), never from the fault's parameters.
"""

from __future__ import annotations

import copy
import inspect
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from faultbench.core.errors import FaultbenchError
from faultbench.faults.recipe import Recipe, call, inputs_of, rows
from faultbench.training.model import build_model
from faultbench.training.monitor import IGNORE_INDEX
from faultbench.training.trace import RunConfig, Trace
from faultbench.training.widths import model_output

TRAINER_EXAMPLES = 64  # training examples a Trainer's probe holds (the memorization probe takes 16)
#: The names a Hugging Face collator gives the labels under (it renames them ``labels``).
LABEL_NAMES = ("label", "label_ids", "labels")


def accuracy(output: torch.Tensor, target: torch.Tensor) -> float:
    """Share of counted targets the output's argmax gets right: a class per row of a
    classifier's ``(N, C)`` output, or a token per counted position of a sequence model's
    ``(N, T, V)`` output (targets equal to -100, the ignore index, do not count)."""
    hits = output.detach().argmax(dim=-1) == target
    counted = target != IGNORE_INDEX
    if bool(counted.all()):
        return float(hits.float().mean())
    return float(hits[counted].float().mean()) if bool(counted.any()) else float("nan")


class Probe:
    """The means to retrain a run's model on its data, outside its loop.

    It offers the model as the run initialized it, the run's loss and its
    training data; not its optimizer, learning rate or loader. Every call to
    :meth:`loss` counts as one probe step, so a diagnosis's cost is measured
    rather than declared.

    The inputs are whatever the model takes, as a loader yields them: a tensor, a
    tuple of tensors (``model(*inputs)``) or a dict (``model(**inputs)``), each with
    one row per example; :meth:`forward` calls the model on them and returns its
    output tensor (a Hugging Face ``ModelOutput``'s logits). With ``own_loss``, the
    inputs carry the labels and the loss is the one the model returned with that
    output (a Hugging Face model's ``loss``): ``probe.loss(probe.forward(model, X), y)``.
    """

    def __init__(
        self,
        model: nn.Module | Callable[[], nn.Module],
        X: Any,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        key: str = "",
        *,
        own_loss: bool = False,
    ) -> None:
        self._model = model
        self._X = X
        self._y = y
        self._loss_fn = loss_fn or F.cross_entropy
        self._own_loss = own_loss
        # The last output forward() returned and the loss the model returned with it.
        self._returned: tuple[torch.Tensor, Any] | None = None
        self.steps_used = 0
        # The stored run this probe rebuilds (its store key, an opaque hash), so that what a
        # deterministic probe found can be reused by the next diagnosis of the same run;
        # "" for a user's probe, which nothing may be reused for.
        self.key = key

    @classmethod
    def from_setup(cls, recipe: Recipe, key: str = "") -> Probe:
        """Build the probe of a run from its (possibly faulty) recipe: its model as
        initialized, its loss and its training data, whatever a fault did to them;
        ``key`` is the stored run's key ("" for none)."""
        return cls(
            build_model(recipe),
            inputs_of(recipe, recipe.X_train, recipe.codes_train),
            torch.from_numpy(recipe.y_train),
            recipe.loss,
            key,
        )

    @classmethod
    def from_user(
        cls,
        make_model: Callable[[], nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
        X: Any,
        y: torch.Tensor,
    ) -> Probe:
        """Build the probe of a user's run from their own pieces.

        Args:
            make_model: Builds the model as the user's script does, before any
                training (a factory, because the monitored model has moved on).
            loss_fn: The loss the script trains with, ``loss_fn(output, target)`` (the
                output a ``ModelOutput``'s logits); None: the model's own loss, which a
                Hugging Face model returns when X holds its ``labels``.
            X: A few training examples' inputs, exactly as the loop feeds them (a bug
                in the inputs must reach the probe too): a tensor, a tuple of tensors
                for a model of several inputs (``model(*X)``), or a dict of them
                (``model(**X)``), each with one row per example.
            y: Their targets (with ``loss_fn=None``, the labels X holds).

        Raises:
            FaultbenchError: ``make_model`` is not callable, X holds no tensor, an
                input and y differ in length, or ``loss_fn=None`` and X is no dict
                holding ``labels``.
        """
        if not callable(make_model) or isinstance(make_model, nn.Module):
            raise FaultbenchError(
                f"make_model must be a function that builds a fresh model; got "
                f"{type(make_model).__name__}"
            )
        if loss_fn is None and not (isinstance(X, Mapping) and "labels" in X):
            got = f"keys {sorted(X)}" if isinstance(X, Mapping) else type(X).__name__
            raise FaultbenchError(
                f"loss_fn=None takes the model's own loss, so X must be a dict holding its "
                f"'labels' (as a Hugging Face model takes them); got {got}"
            )
        inputs = _as_tensors(X)
        target = torch.as_tensor(y)
        for where, tensor in _named_tensors(inputs):
            if tensor.dim() == 0 or len(tensor) != len(target):
                rows = len(tensor) if tensor.dim() else "no"
                raise FaultbenchError(
                    f"{where} has {rows} examples but y has {len(target)}; expected one row "
                    "per example in every input"
                )
        return cls(make_model, inputs, target, loss_fn, own_loss=loss_fn is None)

    @classmethod
    def from_trainer(cls, trainer: Any, *, examples: int = TRAINER_EXAMPLES) -> Probe:
        """Build the probe of a Hugging Face ``Trainer``'s run (before or after training).

        The model is rebuilt from the Trainer's model's config with the run's seed
        (``args.seed``), or by ``trainer.model_init`` when it has one: a fresh copy of the
        architecture as training starts it from scratch (a fine-tuning run's pretrained
        weights are not kept). The loss is the model's own, the Trainer's default
        ``compute_loss`` (a ``compute_loss`` of one's own is not seen: pass its loss to
        :meth:`from_user`). The data are the first ``examples`` training examples as the
        Trainer's collator batches them, labels included, keeping the columns the model's
        ``forward`` takes.

        Raises:
            FaultbenchError: the Trainer has no training data, or its batches hold no
                ``labels``.
        """
        dataset, model = trainer.train_dataset, trainer.model
        if dataset is None:
            raise FaultbenchError(
                "Probe.from_trainer: the Trainer has no train_dataset; expected the data it "
                "trains on"
            )
        takes = _forward_names(model)
        features = [
            {k: v for k, v in row.items() if takes is None or k in takes or k in LABEL_NAMES}
            for row in itertools.islice(iter(dataset), examples)
        ]
        batch = {
            k: v for k, v in trainer.data_collator(features).items() if takes is None or k in takes
        }
        if "labels" not in batch:
            raise FaultbenchError(
                f"Probe.from_trainer: the Trainer's batches hold {sorted(batch)}, no 'labels'; "
                "expected the labels the model's own loss reads (or use Probe.from_user with "
                "your loss)"
            )
        if trainer.model_init is not None:
            init = trainer.model_init
            takes_trial = len(inspect.signature(init).parameters) == 1
            build: Callable[[], nn.Module] = partial(init, None) if takes_trial else init
        else:
            model_class: Callable[..., nn.Module] = type(model)
            build = partial(model_class, copy.deepcopy(model.config))
        return cls.from_user(
            partial(_seeded, build, trainer.args.seed), None, batch, batch["labels"]
        )

    def make_model(self) -> nn.Module:
        """A fresh copy of the model as the run initialized it."""
        if isinstance(self._model, nn.Module):
            return copy.deepcopy(self._model)
        return self._model()

    def forward(self, model: nn.Module, inputs: Any) -> torch.Tensor:
        """``model``'s output tensor on ``inputs`` (as :meth:`train_data` gives them)."""
        returned = call(model, inputs)
        output = output_tensor(returned)
        if self._own_loss:
            own = returned.get("loss") if isinstance(returned, Mapping) else None
            self._returned = (output, own)
        return output

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The run's loss on a model output; counts one probe step.

        Raises:
            FaultbenchError: a probe of the model's own loss given an output that is not
                the last one :meth:`forward` returned, or that came with no loss.
        """
        self.steps_used += 1
        if not self._own_loss:
            return self._loss_fn(output, target)
        output_was, own = self._returned or (None, None)
        if output_was is not output or not isinstance(own, torch.Tensor):
            raise FaultbenchError(
                "this probe's loss is the model's own: expected the output of the last "
                "probe.forward(model, X), a model output that came with its loss (X holds "
                "the 'labels')"
            )
        return own

    def train_data(self, n: int | None = None) -> tuple[Any, torch.Tensor]:
        """The first ``n`` training examples (all when ``n`` is None), as the run saw them:
        their inputs (the structure the model takes) and targets."""
        stop = len(self._y) if n is None else n
        return rows(self._X, slice(0, stop)), self._y[:stop]

    @property
    def examples(self) -> int:
        """How many training examples the probe holds."""
        return len(self._y)

    def __repr__(self) -> str:
        return f"Probe(train_examples={len(self._y)}, steps_used={self.steps_used})"


def output_tensor(output: Any) -> torch.Tensor:
    """A model's output as one tensor: itself, a ``ModelOutput``'s (or dict's) ``logits``,
    or the first tensor of a tuple that is not its 0-d loss
    (:func:`faultbench.training.widths.model_output`)."""
    found = model_output(output)
    if found is None:
        raise FaultbenchError(
            f"the model returned {type(output).__name__}; expected a tensor, a tuple holding "
            "one, or a mapping with 'logits'"
        )
    return found


def _seeded(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``build()`` drawing its initial weights from ``seed``, the caller's random stream
    left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def _forward_names(model: nn.Module) -> set[str] | None:
    """The keyword inputs ``model.forward`` takes (None: any, it takes ``**kwargs``)."""
    params = inspect.signature(model.forward).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def _as_tensors(X: Any) -> Any:
    if isinstance(X, (tuple, list)):
        return tuple(_as_tensors(x) for x in X)
    if isinstance(X, Mapping):
        return {k: _as_tensors(v) for k, v in X.items()}
    try:
        return torch.as_tensor(X)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise FaultbenchError(
            f"X must be a tensor, a tuple or a dict of tensors; got {type(X).__name__} ({exc})"
        ) from None


def _named_tensors(inputs: Any, where: str = "X") -> list[tuple[str, torch.Tensor]]:
    if isinstance(inputs, tuple):
        return [pair for i, x in enumerate(inputs) for pair in _named_tensors(x, f"{where}[{i}]")]
    if isinstance(inputs, dict):
        return [pair for k, x in inputs.items() for pair in _named_tensors(x, f"{where}[{k!r}]")]
    return [(where, inputs)]


@dataclass(frozen=True, eq=False)
class Run:
    """One finished training run, as a diagnoser sees it."""

    task: str  # the task's name (a practitioner knows their task)
    seed: int  # the run's seed, for diagnosers that randomize
    trace: Trace  # everything the loop recorded
    config: RunConfig  # what is observable without running anything
    probe: Probe | None = None  # None when the run cannot be rebuilt (a user's loop)
    # What each instrument the diagnoser declared saw in the loop as it trained, by the
    # instrument's name (its ``finish()`` record); empty for a diagnoser without one.
    instruments: Mapping[str, dict[str, Any]] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Run(task={self.task!r}, seed={self.seed}, steps={self.trace.steps})"
