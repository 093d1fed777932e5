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
from faultbench.tasks.kinds import KINDS, MULTICLASS, Kind, get_kind, infer_kind
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
    """A task: its kind, normalized train/validation arrays and training defaults.

    Build one with :meth:`from_arrays`; registered tasks are built by
    ``faultbench.datasets`` and looked up by name with :func:`get_task`.
    """

    name: str  # how reports and ``tuned_on`` refer to the task
    X_train: np.ndarray  # float32 numeric inputs, normalized with training statistics
    y_train: np.ndarray  # int64 class indices, or float32 (N, k) targets (see ``kind``)
    X_val: np.ndarray  # float32, normalized with the same statistics
    y_val: np.ndarray  # the validation targets, as ``y_train``
    classes: tuple[Any, ...]  # original label of each class index (() for a non-class kind)
    defaults: TrainDefaults = field(default_factory=TrainDefaults)
    inapplicable: Mapping[str, str] = field(default_factory=dict)  # fault -> why it cannot apply
    family: Family | None = None  # the designs its grid draws; None: its architecture's default
    sequences: Sequences | None = None  # a sequence task's tokens, prompts and units; else None
    reference: Design | None = None  # the reference design written out; None: from the defaults
    kind: Kind = MULTICLASS  # what it predicts (faultbench.tasks.kinds)
    # A second input of categorical codes (int64, one column per categorical feature), fed
    # to the model beside the numeric X: a model of two inputs. None: one input, X.
    codes_train: np.ndarray | None = None
    codes_val: np.ndarray | None = None  # the validation rows' codes
    code_sizes: tuple[int, ...] = ()  # distinct values of each code column (embedding rows)

    @property
    def n_classes(self) -> int:
        """Number of classes (0 for a kind without classes)."""
        return len(self.classes)

    @property
    def n_outputs(self) -> int:
        """What the model outputs per example (per position, for a sequence): the classes,
        one logit for a binary task, one per label or target, the inputs to rebuild."""
        if self.kind.float_targets:
            return int(self.y_train.shape[1])
        return self.n_classes

    @property
    def inputs(self) -> int:
        """Inputs the model takes: 2 with categorical codes beside the numbers, else 1."""
        return 1 if self.codes_train is None else 2

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
        outputs = (
            f"outputs={self.n_outputs}" if self.kind.float_targets else f"classes={self.n_classes}"
        )
        codes = f", codes={len(self.code_sizes)}" if self.code_sizes else ""
        return (
            f"Task({self.name!r}, {self.kind.name}, train={len(self.y_train)}, "
            f"val={len(self.y_val)}, features={self.n_features}{codes}, {outputs})"
        )

    @classmethod
    def from_arrays(
        cls,
        name: str,
        X: Any,
        y: Sequence[Hashable] | np.ndarray | None = None,
        *,
        kind: str | Kind | None = None,
        codes: Any = None,
        val_fraction: float = 0.2,
        split_seed: int = 0,
        defaults: TrainDefaults | None = None,
        normalize: bool = True,
        family: Family | None = None,
    ) -> Task:
        """Turn a user's arrays into a task with the benchmark's split and scaling.

        Args:
            name: The task's name in reports.
            X: A 2-D array of finite numbers, one row per example (it may have no column
                when ``codes`` carries every input).
            y: The targets: one label per row, of any hashable type (strings are fine),
                for classes; a 0/1 matrix for labels; floats (a vector or a matrix) for
                regression; None for a reconstruction (the targets are the inputs).
            kind: What the task predicts (:data:`faultbench.tasks.kinds.KINDS`); inferred
                from ``y`` when omitted (:func:`~faultbench.tasks.kinds.infer_kind`).
            codes: Categorical features as non-negative integer codes, a 2-D array with
                one row per example: the model's second input (embedded, not normalized).
            val_fraction: Share of examples held out for validation.
            split_seed: Seed of the split (stratified by class for a class kind).
            defaults: Training defaults; the benchmark's when omitted.
            normalize: Standardize features (and a regression's targets) with training
                statistics; turn it off for inputs that are indices (token ids).
            family: The healthy designs the default grid draws; by default the
                family of the defaults' architecture (:class:`Family`).

        Returns:
            The task.

        Raises:
            FaultbenchError: X is not 2-D or is not finite; no input at all; a target is
                missing or not finite; lengths differ; ``y`` fits no kind or is ambiguous
                (declare ``kind=``); a class with fewer than
                :data:`MIN_EXAMPLES_PER_CLASS` examples (a label with fewer positives);
                codes that are not non-negative integers; or a column's values span too
                wide a range to normalize in float32.
        """
        X_arr = _validated_inputs(X, codes)
        the_kind = _kind_of(kind, y)
        code_arr = _validated_codes(codes, len(X_arr))
        targets, classes, strata = _targets(the_kind, X_arr, y)
        rows = _split_rows(len(X_arr), strata, val_fraction, split_seed)
        X_tr, X_va = X_arr[rows[0]], X_arr[rows[1]]
        if normalize:
            X_tr32, X_va32 = _normalized(X_tr, X_va)
        else:
            X_tr32, X_va32 = X_tr.astype(np.float32), X_va.astype(np.float32)
        if the_kind.name == "reconstruction":  # the targets are the inputs the model sees
            y_tr, y_va = X_tr32.copy(), X_va32.copy()
        else:
            y_tr, y_va = targets[rows[0]], targets[rows[1]]
            if the_kind.name == "regression" and normalize:
                y_tr, y_va = _normalized(y_tr, y_va)
        return cls(
            name=name,
            X_train=X_tr32,
            y_train=y_tr,
            X_val=X_va32,
            y_val=y_va,
            classes=classes,
            defaults=defaults or TrainDefaults(),
            family=family,
            kind=the_kind,
            codes_train=None if code_arr is None else code_arr[rows[0]],
            codes_val=None if code_arr is None else code_arr[rows[1]],
            code_sizes=() if code_arr is None else tuple(int(c) + 1 for c in code_arr.max(0)),
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
            kind=KINDS["next_token"],
        )


def _validated_inputs(X: Any, codes: Any) -> np.ndarray:
    try:
        X_arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise FaultbenchError(f"X must be a 2-D array of numbers; got {exc}") from None
    if X_arr.ndim != 2:
        raise FaultbenchError(f"X must be 2-D (examples x features); got shape {X_arr.shape}")
    if X_arr.shape[1] == 0 and codes is None:
        raise FaultbenchError(f"X has no features (shape {X_arr.shape}); expected at least 1")
    bad = ~np.isfinite(X_arr)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise FaultbenchError(
            f"X must be finite; found {X_arr[row, col]} at row {row}, column {col} "
            f"({int(bad.sum())} non-finite values in all)"
        )
    return X_arr


def _kind_of(kind: str | Kind | None, y: Any) -> Kind:
    if kind is not None:
        return get_kind(kind)
    if y is None:
        raise FaultbenchError(
            "y is None: a task needs targets, or kind='reconstruction' (the inputs are the targets)"
        )
    try:
        return infer_kind(np.asarray(y))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, FaultbenchError):
            raise
        raise FaultbenchError(f"y must be 1-D labels or a 2-D target matrix; got {exc}") from None


def _validated_codes(codes: Any, rows: int) -> np.ndarray | None:
    if codes is None:
        return None
    arr = np.asarray(codes)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[1] == 0 or arr.dtype.kind not in "iu" or (arr < 0).any():
        raise FaultbenchError(
            f"codes of shape {arr.shape} and dtype {arr.dtype}; expected non-negative integer "
            "codes, one row per example and one column per categorical feature"
        )
    if len(arr) != rows:
        raise FaultbenchError(f"X has {rows} rows but codes has {len(arr)}; expected equal")
    return arr.astype(np.int64)


def _targets(kind: Kind, X: np.ndarray, y: Any) -> tuple[np.ndarray, tuple[Any, ...], Any]:
    """The kind's target array, its class names (() without classes) and the strata of the
    split (class indices, or None for a random split)."""
    if kind.name == "reconstruction":
        if y is not None:
            raise FaultbenchError("kind='reconstruction' rebuilds X: expected y=None")
        return np.zeros((len(X), 0), np.float32), (), None
    if y is None:
        raise FaultbenchError(f"kind='{kind.name}' needs targets y; got None")
    if kind.name in ("multiclass", "binary"):
        labels = _labels_of(y, len(X))
        classes, y_idx = _encode_labels(labels)
        if kind.name == "multiclass":
            return y_idx, classes, y_idx
        if len(classes) != 2:
            raise FaultbenchError(
                f"kind='binary' needs exactly 2 classes; y has {len(classes)} "
                "(use kind='multiclass' for more)"
            )
        return y_idx.astype(np.float32)[:, None], classes, y_idx
    if kind.name == "next_token":
        raise FaultbenchError("kind='next_token': build a sequence task with Task.from_sequences")
    values = _float_targets(y, len(X))
    if kind.name == "multilabel":
        if not np.isin(values, (0.0, 1.0)).all() or values.shape[1] < 2:
            raise FaultbenchError(
                f"kind='multilabel' needs a 0/1 matrix of at least 2 labels; got shape "
                f"{values.shape} with values {np.unique(values)[:5].tolist()}"
            )
        positives = values.sum(axis=0)
        rare = int(positives.argmin())
        if positives[rare] < MIN_EXAMPLES_PER_CLASS:
            raise FaultbenchError(
                f"label {rare} has {int(positives[rare])} positive examples; expected at least "
                f"{MIN_EXAMPLES_PER_CLASS} per label, enough to train on and to validate on"
            )
    elif len(np.unique(values, axis=0)) < 2:
        raise FaultbenchError("y is constant; expected targets that vary")
    return values.astype(np.float32), (), None


def _float_targets(y: Any, rows: int) -> np.ndarray:
    try:
        values = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise FaultbenchError(f"y must hold numbers for this kind; got {exc}") from None
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2 or len(values) != rows:
        raise FaultbenchError(
            f"X has {rows} rows but y has shape {values.shape}; expected {rows} rows of targets"
        )
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise FaultbenchError(
            f"y must be finite; found {values[bad][0]} at row {row} ({int(bad.sum())} in all)"
        )
    return values


def _labels_of(y: Any, rows: int) -> list[Hashable]:
    try:
        y_arr = np.asarray(y, dtype=object)
    except (TypeError, ValueError) as exc:  # ragged nested lists
        raise FaultbenchError(f"y must be 1-D, one label per row; got {exc}") from None
    if y_arr.ndim != 1:
        raise FaultbenchError(f"y must be 1-D, one label per row; got shape {y_arr.shape}")
    labels = list(y_arr)
    if len(labels) != rows:
        raise FaultbenchError(
            f"X has {rows} rows but y has {len(labels)} labels; expected equal lengths"
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
    return labels


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


def _split_rows(
    n: int, strata: np.ndarray | None, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The training and validation rows: stratified by class when ``strata`` are given."""
    if not 0.0 < val_fraction < 1.0:
        raise FaultbenchError(f"val_fraction must be in (0, 1); got {val_fraction}")
    from sklearn.model_selection import train_test_split  # here: `import faultbench` stays light

    rows = np.arange(n)
    if strata is None:
        n_val = min(max(1, round(n * val_fraction)), n - 1)
        train, val = train_test_split(rows, test_size=n_val, random_state=seed)
        return train, val
    n_classes = int(strata.max()) + 1
    # Every class has MIN_EXAMPLES_PER_CLASS examples (checked), so a stratified
    # split with room for each class on both sides always exists: no class is
    # missing from training.
    n_val = min(max(n_classes, round(n * val_fraction)), n - n_classes)
    train, val = train_test_split(rows, test_size=n_val, random_state=seed, stratify=strata)
    return train, val


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
        axes = task.design_family().axes()  # the transformer axes too, but not the loaders:
        axes.pop("loaders")  # a drawn design keys its runs with its loader (fingerprints kept)
        digest.update(repr(axes).encode())
    if task.reference is not None:
        digest.update(repr(task.reference).encode())
    # Only a task of another kind, or of two inputs, has these: a classifier's keeps its own.
    if task.kind.name not in ("multiclass", "next_token"):
        digest.update(task.kind.name.encode())
    if task.codes_train is not None and task.codes_val is not None:
        digest.update(np.ascontiguousarray(task.codes_train).tobytes())
        digest.update(np.ascontiguousarray(task.codes_val).tobytes())
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
