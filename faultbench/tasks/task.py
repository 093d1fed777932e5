"""Tasks: a labelled data set split and normalized once, plus the training defaults.

A task is the thing a diagnoser may be *tuned on*; keeping its name stable is
what lets a report say "tuned-on" or "held-out" honestly.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from faultbench.core.errors import FaultbenchError, unknown_name
from faultbench.core.registry import Registry
from faultbench.tasks.design import OPTIMIZERS, Design, Family, reference_design
from faultbench.tasks.sequences import Sequences, encode, next_token_labels, split_by_unit

#: Fewest examples of any class a task may have. At the default validation share
#: (0.2) that leaves two examples of each class to validate on and eight to train
#: on: with fewer, one example moves a class's validation accuracy by a half or
#: more, too coarse to tell a model that learned from one at chance.
MIN_EXAMPLES_PER_CLASS = 10


@dataclass(frozen=True)
class TrainDefaults:
    """How a healthy run of a task is trained.

    Raises:
        FaultbenchError: an optimizer other than "adam" or "sgd".
    """

    hidden: int = 64  # width of the single ReLU hidden layer
    lr: float = 1e-3  # the optimizer's working learning rate for the task
    batch_size: int = 32  # examples per update
    steps: int = 600  # optimizer updates per run
    architecture: str = "mlp"  # "mlp", "cnn" (images), "gru" or "transformer" (token ids)
    image_side: int = 0  # side of the square images a "cnn" reads from each row
    optimizer: str = "adam"  # "adam", "adamw", "sgd" (with momentum) or "rmsprop"
    momentum: float = 0.9  # SGD's momentum (the others have none)

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise unknown_name("optimizer", self.optimizer, OPTIMIZERS)


@dataclass(frozen=True, eq=False)
class Task:
    """A classification task: normalized train/validation arrays and defaults.

    Build one with :meth:`from_arrays`; registered tasks are built by
    ``faultbench.datasets`` and looked up by name with :func:`get_task`.
    """

    name: str  # how reports and ``tuned_on`` refer to the task
    X_train: np.ndarray  # float32, normalized with training statistics
    y_train: np.ndarray  # int64 class indices
    X_val: np.ndarray  # float32, normalized with the same statistics
    y_val: np.ndarray  # int64 class indices
    classes: tuple[Any, ...]  # original label of each class index
    defaults: TrainDefaults = field(default_factory=TrainDefaults)
    inapplicable: Mapping[str, str] = field(default_factory=dict)  # fault -> why it cannot apply
    family: Family | None = None  # the designs its grid draws; None: its architecture's default
    sequences: Sequences | None = None  # a sequence task's tokens, prompts and units; else None
    reference: Design | None = None  # the reference design written out; None: from the defaults

    @property
    def n_classes(self) -> int:
        """Number of classes."""
        return len(self.classes)

    @property
    def n_features(self) -> int:
        """Number of input features."""
        return int(self.X_train.shape[1])

    @property
    def fingerprint(self) -> str:
        """A hash of the arrays and defaults: part of every run's cache key."""
        return _fingerprint(self)

    def reference_design(self) -> Design:
        """The task's reference recipe: its defaults, one hidden layer, nothing drawn (or the
        design the task wrote out, for a model that is more than one hidden layer)."""
        if self.reference is not None:
            return self.reference
        d = self.defaults
        return reference_design(
            architecture=d.architecture,
            hidden=d.hidden,
            optimizer=d.optimizer,
            lr=d.lr,
            batch_size=d.batch_size,
            momentum=d.momentum,
        )

    def design_family(self) -> Family:
        """The space of healthy designs the task's default grid draws from."""
        return self.family or Family(self.defaults.architecture)

    def __repr__(self) -> str:
        return (
            f"Task({self.name!r}, train={len(self.y_train)}, val={len(self.y_val)}, "
            f"features={self.n_features}, classes={self.n_classes})"
        )

    @classmethod
    def from_arrays(
        cls,
        name: str,
        X: Any,
        y: Sequence[Hashable] | np.ndarray,
        *,
        val_fraction: float = 0.2,
        split_seed: int = 0,
        defaults: TrainDefaults | None = None,
        normalize: bool = True,
        family: Family | None = None,
    ) -> Task:
        """Turn a user's arrays into a task with the benchmark's split and scaling.

        Args:
            name: The task's name in reports.
            X: A 2-D array of finite numbers, one row per example.
            y: One label per row, of any hashable type (strings are fine).
            val_fraction: Share of examples held out for validation.
            split_seed: Seed of the stratified split.
            defaults: Training defaults; the benchmark's when omitted.
            normalize: Standardize features with training statistics; turn it
                off for inputs that are indices (token ids), not magnitudes.
            family: The healthy designs the default grid draws; by default the
                family of the defaults' architecture (:class:`Family`).

        Returns:
            The task.

        Raises:
            FaultbenchError: X is not 2-D, has no feature or is not finite; a
                label is missing (None or NaN); lengths differ; there is a single
                class, or a class with fewer than :data:`MIN_EXAMPLES_PER_CLASS`
                examples; or a column's values span too wide a range to
                normalize in float32.
        """
        X_arr, labels = _validated(X, y)
        classes, y_idx = _encode_labels(labels)
        X_tr, X_va, y_tr, y_va = _split(X_arr, y_idx, val_fraction, split_seed)
        if normalize:
            X_tr32, X_va32 = _normalized(X_tr, X_va)
        else:
            X_tr32, X_va32 = X_tr.astype(np.float32), X_va.astype(np.float32)
        return cls(
            name=name,
            X_train=X_tr32,
            y_train=y_tr.astype(np.int64),
            X_val=X_va32,
            y_val=y_va.astype(np.int64),
            classes=classes,
            defaults=defaults or TrainDefaults(),
            family=family,
        )

    @classmethod
    def from_sequences(
        cls,
        name: str,
        examples: Sequence[tuple[Sequence[str], Sequence[str], int]],
        vocab: tuple[str, ...],
        *,
        context: int,
        defaults: TrainDefaults,
        reference: Design,
        family: Family,
        val_fraction: float = 0.2,
        split_seed: int = 0,
    ) -> Task:
        """A sequence task (see :mod:`faultbench.tasks.sequences`) from generated examples.

        Args:
            name: The task's name in reports.
            examples: ``(prompt words, answer words, source unit)`` per example.
            vocab: Every token, the specials (``<pad>``, ``<bos>``, ``<eos>``) first.
            context: Tokens per row; longer examples are cut (and counted).
            defaults: Training defaults (steps, batch, optimizer and rate).
            reference: The reference design (a transformer of several blocks).
            family: The healthy designs the full grid draws.
            val_fraction: Share of the source units held out for validation: a unit's
                examples all go to one side.
            split_seed: Seed of the split.

        Raises:
            FaultbenchError: a vocabulary that does not start with the specials, or a
                word outside it.
        """
        from faultbench.tasks.sequences import SPECIALS

        if tuple(vocab[: len(SPECIALS)]) != SPECIALS:
            raise FaultbenchError(f"vocab must start with {SPECIALS}; got {tuple(vocab[:3])}")
        try:
            X, prompts, lengths, units, cut = encode(examples, vocab, context)
        except ValueError as exc:
            raise FaultbenchError(f"task '{name}': {exc}") from None
        train, val = split_by_unit(units, val_fraction=val_fraction, seed=split_seed)
        sequences = Sequences(
            vocab=vocab,
            pad=0,
            prompt_train=prompts[train],
            length_train=lengths[train],
            units_train=units[train],
            prompt_val=prompts[val],
            length_val=lengths[val],
            units_val=units[val],
            truncated=cut,
        )
        return cls(
            name=name,
            X_train=X[train],
            y_train=next_token_labels(X[train], prompts[train], lengths[train]),
            X_val=X[val],
            y_val=next_token_labels(X[val], prompts[val], lengths[val]),
            classes=vocab,
            defaults=defaults,
            family=family,
            sequences=sequences,
            reference=reference,
        )


def _validated(X: Any, y: Any) -> tuple[np.ndarray, list[Hashable]]:
    try:
        X_arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise FaultbenchError(f"X must be a 2-D array of numbers; got {exc}") from None
    if X_arr.ndim != 2:
        raise FaultbenchError(f"X must be 2-D (examples x features); got shape {X_arr.shape}")
    if X_arr.shape[1] == 0:
        raise FaultbenchError(f"X has no features (shape {X_arr.shape}); expected at least 1")
    try:
        y_arr = np.asarray(y, dtype=object)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise FaultbenchError(f"y must be 1-D, one label per row; got {exc}") from None
    if y_arr.ndim != 1:
        raise FaultbenchError(f"y must be 1-D, one label per row; got shape {y_arr.shape}")
    labels = list(y_arr)
    if len(labels) != len(X_arr):
        raise FaultbenchError(
            f"X has {len(X_arr)} rows but y has {len(labels)} labels; expected equal lengths"
        )
    bad = ~np.isfinite(X_arr)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise FaultbenchError(
            f"X must be finite; found {X_arr[row, col]} at row {row}, column {col} "
            f"({int(bad.sum())} non-finite values in all)"
        )
    missing = [i for i, lab in enumerate(labels) if lab is None or _is_nan(lab)]
    if missing:
        raise FaultbenchError(
            f"y has a missing label ({labels[missing[0]]!r}) at row {missing[0]} "
            f"({len(missing)} in all); expected a label for every row"
        )
    try:
        n_classes = len(set(labels))
    except TypeError as exc:
        raise FaultbenchError(f"y labels must be hashable (numbers or strings); {exc}") from None
    if n_classes < 2:
        raise FaultbenchError(f"y has {n_classes} class; expected at least 2 classes")
    counts = Counter(labels)
    rare = min(counts, key=lambda label: counts[label])
    if counts[rare] < MIN_EXAMPLES_PER_CLASS:
        few = sum(n < MIN_EXAMPLES_PER_CLASS for n in counts.values())
        raise FaultbenchError(
            f"class {rare!r} has {counts[rare]} example{'s' if counts[rare] != 1 else ''} "
            f"({few} of {n_classes} classes have fewer than {MIN_EXAMPLES_PER_CLASS}; "
            f"{len(labels)} examples in all); expected at least {MIN_EXAMPLES_PER_CLASS} per "
            "class, enough to train on and to validate on"
        )
    return X_arr, labels


def _is_nan(label: object) -> bool:
    # NaN is not equal to itself, so it would make a new class per row.
    return isinstance(label, (float, np.floating)) and bool(np.isnan(label))


def _normalized(X_tr: np.ndarray, X_va: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both splits standardized with the training statistics, as float32."""
    with np.errstate(all="ignore"):  # overflow is checked below
        mean = X_tr.mean(axis=0)
        std = X_tr.std(axis=0)
    overflow = ~(np.isfinite(mean) & np.isfinite(std))
    if overflow.any():
        col = int(np.argmax(overflow))
        raise FaultbenchError(
            f"X column {col} is too large to normalize: its training mean/spread overflow "
            f"(largest magnitude {np.abs(X_tr[:, col]).max():g}); expected values below 1e150"
        )
    # Constant features (digits' blank corners) stay at 0 (std 1). A spread that
    # is only rounding noise next to the column's size would blow validation
    # values up past float32, so such a column is scaled by its size instead.
    size = np.abs(X_tr).max(axis=0)
    noise = (std > 0) & (std <= 1e-12 * size)
    std[noise] = size[noise]
    std[std == 0] = 1.0
    with np.errstate(all="ignore"):
        out = ((X_tr - mean) / std).astype(np.float32), ((X_va - mean) / std).astype(np.float32)
    for arr, raw in zip(out, (X_tr, X_va), strict=True):
        bad = ~np.isfinite(arr)
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            raise FaultbenchError(
                f"X column {col} spans too wide a range to normalize in float32: "
                f"{raw[row, col]:g} against a training mean {mean[col]:g} and spread "
                f"{std[col]:g}; "
                "expected values that can be rescaled, e.g. below 1e150 in magnitude"
            )
    return out


def _encode_labels(labels: list[Hashable]) -> tuple[tuple[Any, ...], np.ndarray]:
    unique = list(dict.fromkeys(labels))  # first-appearance order for unsortable mixes
    with contextlib.suppress(TypeError):  # unsortable mixes keep first-appearance order
        unique = sorted(unique)  # type: ignore[type-var]
    index = {label: i for i, label in enumerate(unique)}
    classes = tuple(u.item() if isinstance(u, np.generic) else u for u in unique)
    return classes, np.array([index[label] for label in labels], dtype=np.int64)


def _split(
    X: np.ndarray, y: np.ndarray, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if not 0.0 < val_fraction < 1.0:
        raise FaultbenchError(f"val_fraction must be in (0, 1); got {val_fraction}")
    n_classes = int(y.max()) + 1
    # Every class has MIN_EXAMPLES_PER_CLASS examples (checked), so a stratified
    # split with room for each class on both sides always exists: no class is
    # missing from training.
    n_val = min(max(n_classes, round(len(y) * val_fraction)), len(y) - n_classes)
    from sklearn.model_selection import train_test_split  # here: `import faultbench` stays light

    X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=n_val, random_state=seed, stratify=y)
    return X_tr, X_va, y_tr, y_va


def _fingerprint(task: Task) -> str:
    cached = task.__dict__.get("_fingerprint")
    if cached is not None:
        return str(cached)
    digest = hashlib.sha256()
    for arr in (task.X_train, task.y_train, task.X_val, task.y_val):
        digest.update(np.ascontiguousarray(arr).tobytes())
    digest.update(repr((task.name, task.classes, task.defaults, task.design_family())).encode())
    # Only a sequence task has these: every other task keeps the fingerprint it had.
    if task.sequences is not None:
        digest.update(task.sequences.digest.encode())
        digest.update(repr(task.design_family().axes()).encode())  # the transformer axes too
    if task.reference is not None:
        digest.update(repr(task.reference).encode())
    value = digest.hexdigest()[:16]
    object.__setattr__(task, "_fingerprint", value)  # frozen, but a pure cache
    return value


#: Registered task builders, looked up by name.
TASKS: Registry[Callable[[], Task]] = Registry(
    "task",
    builtin="faultbench.datasets",
    group="faultbench.tasks",
    adapt=lambda name, obj: _task_builder(obj),
)


def _task_builder(obj: object) -> Callable[[], Task]:
    """A plug-in's task: a ``Task``, or a function of no arguments that returns one."""
    if isinstance(obj, Task):
        return lambda: obj
    if not callable(obj):
        raise TypeError(f"expected a Task or a function returning one; got {type(obj).__name__}")

    @functools.wraps(obj)  # keeps the builder's docstring: `faultbench list` shows it
    def build() -> Task:
        task = obj()
        if not isinstance(task, Task):
            raise FaultbenchError(f"task plug-in returned {type(task).__name__}, expected Task")
        return task

    return build


def get_task(task: str | Task) -> Task:
    """Return ``task`` itself, or build the registered task of that name (once).

    Raises:
        FaultbenchError: an unknown name, or a ``Task`` that carries the name of a
            registered task but other data or defaults: reports call a task
            tuned-on by its name, so it would be scored as the registered one.
    """
    if isinstance(task, Task):
        _refuse_borrowed_name(task)
        return task
    if not isinstance(task, str):
        raise FaultbenchError(f"task must be a name or a Task; got {type(task).__name__}")
    builder = TASKS.get(task)
    return _built(task, builder)


def _refuse_borrowed_name(task: Task) -> None:
    if task.name not in TASKS:
        return
    registered = get_task(task.name)
    if registered is task or registered.fingerprint == task.fingerprint:
        return  # the registered task itself, or the same arrays and defaults rebuilt
    raise FaultbenchError(
        f"task '{task.name}' has the name of a registered task but other data or defaults "
        f"(fingerprint {task.fingerprint}, registered {registered.fingerprint}); a diagnoser "
        f"tuned on '{task.name}' would be scored on it as tuned-on. Expected a name of its "
        f"own, e.g. Task.from_arrays('my-{task.name}', X, y)"
    )


@cache
def _built(name: str, builder: Callable[[], Task]) -> Task:
    return builder()


def task_names() -> list[str]:
    """Names of the registered tasks."""
    return TASKS.names()
