"""The faults on every kind of task: each variant applies to a task of each kind or says why
not (naming the kind's own form of the bug), each form made for binary, multi-label,
regression and two-input tasks does what its summary says, and each shows against healthy
runs in every seed on a task of its kind."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import SIGNAL_SEEDS
from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import (
    FAULTS,
    HELD_OUT,
    Condition,
    condition,
    find,
    inapplicable,
    variant_conditions,
    variant_ids,
)
from faultbench.faults.recipe import Recipe, base_setup, call, inputs_of
from faultbench.scoring.manifest import manifestation
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.runner import ensure_records
from faultbench.storage.store import Store
from faultbench.tasks.design import Design
from faultbench.tasks.task import Task, TrainDefaults, get_task, task_names
from faultbench.training.engine import SerialEngine
from faultbench.training.model import build_model

N_ROWS = 800  # examples of each generated task (a fifth validates)
FAST = TrainDefaults(lr=0.01, steps=300)  # trains each generated task well in < 0.5 CPU s
HEALTHY_REFERENCE = 10  # as tests/test_variants.py: fewer leave a 5-sd interval wider still


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _binary() -> Task:
    """One yes/no label of a nonlinear score, a fifth of them yes (where a weight is used)."""
    rng = _rng(2)
    X = rng.normal(size=(N_ROWS, 8))
    score = X[:, 0] * X[:, 1] + np.sin(2 * X[:, 2]) + 0.5 * X[:, 3] + rng.normal(0, 0.3, N_ROWS)
    y = (score > np.quantile(score, 0.8)).astype(int)
    return Task.from_arrays("kinds-binary", X, y, kind="binary", defaults=FAST)


def _multilabel() -> Task:
    """Five labels per row, each a nonlinear function of ten features."""
    rng = _rng(3)
    X = rng.normal(size=(N_ROWS, 10))
    score = np.tanh(X @ rng.normal(size=(10, 5))) + 0.5 * X[:, :5] ** 2
    Y = (score > np.array([1.0, 1.2, 0.8, 1.5, 1.1])).astype(float)
    return Task.from_arrays("kinds-multilabel", X, Y, defaults=FAST)


def _two_inputs() -> Task:
    """A rating from a user's and an item's codes (biases and a 2-D match) and a number."""
    rng = _rng(4)
    n, users, items = 2 * N_ROWS, 20, 15
    user, item = rng.integers(0, users, n), rng.integers(0, items, n)
    taste, trait = rng.normal(size=(users, 2)), rng.normal(size=(items, 2))
    X = rng.normal(size=(n, 3))
    y = rng.normal(size=users)[user] + rng.normal(size=items)[item]
    y += (taste[user] * trait[item]).sum(axis=1) + X[:, 0] + rng.normal(0, 0.3, n)
    defaults = TrainDefaults(lr=0.01, steps=300, architecture="tabular")
    codes = np.stack([user, item], axis=1)
    return Task.from_arrays("kinds-ratings", X, y, codes=codes, defaults=defaults)


def _autoencoder() -> Task:
    """scikit-learn's digits rebuilt through a 16-unit code."""
    from sklearn.datasets import load_digits

    defaults = TrainDefaults(lr=0.01, steps=300, hidden=16)
    X = load_digits().data[:1000]
    return Task.from_arrays("kinds-autoencoder", X, kind="reconstruction", defaults=defaults)


KIND_TASKS: dict[str, Task] = {
    t.kind.name if not t.code_sizes else "two_inputs": t
    for t in (_binary(), _multilabel(), _two_inputs(), _autoencoder())
}


def _dropout_base() -> tuple[Task, Design]:
    """digits on a design with dropout: measured on digits, a dropout of 0.5 before a 32-unit
    output costs 0.10-0.13 of validation accuracy when left on (0.2 before 64 units on a
    regression: within the healthy spread)."""
    digits = get_task("digits")
    return digits, digits.reference_design().with_network(dropout=0.5, widths=(32,))


def _shipped_or(name: str, build: Callable[[], Task]) -> Task:
    """The shipped task ``name`` once it is registered (issue 38's tasks of every kind), else
    a generated task of its kind."""
    return get_task(name) if name in task_names() else build()


def _bases() -> tuple[tuple[Task, Design | None], ...]:
    """Where each form that only the new kinds (or a design with dropout) have is shown: the
    first of them it applies to."""
    shipped = (
        _shipped_or("cancer", _binary),
        _shipped_or("tags", _multilabel),
        _shipped_or("diabetes", _two_inputs),  # the regression forms
        _shipped_or("churn", _two_inputs),  # the code table
    )
    unique = list({task.name: task for task in shipped}.values())
    return (*((task, None) for task in unique), _dropout_base())


BASES = _bases()
#: The variants no shipped multi-class or sequence task can show (tests/test_variants.py
#: and tests/test_language_faults.py show theirs), and the held-out faults of dropout.
NEW_FORMS = (
    "label_mismatch.positive_flipped",
    "label_mismatch.label_columns",
    "label_mismatch.misaligned",
    "softmax_before_loss.sigmoid_logits",
    "softmax_before_loss.sigmoid_output",
    "softmax_before_loss.relu_output",
    "frozen_layer.code_table",
    "label_noise.flipped",
    "label_noise.wrong_rows",
    "raw_targets",
    "broadcast_targets",
    "inverted_pos_weight",
    "dropout_at_eval",
)


def _why_not(ident: str, task: Task, design: Design | None = None) -> str:
    return condition(ident).why_not(base_setup(task, 0, design))


def _base_for(ident: str) -> tuple[Task, Design | None]:
    """The first base of BASES the variant applies to."""
    for task, design in BASES:
        if not _why_not(ident, task, design):
            return task, design
    raise AssertionError(f"{ident} applies to none of the bases")


def test_every_variant_only_the_new_kinds_have_is_shown() -> None:
    classic = [
        get_task(t) for t in task_names() if get_task(t).kind.name in ("multiclass", "next_token")
    ]
    only_new = [i for i in variant_ids() if all(inapplicable(i, t) for t in classic)]
    assert sorted(only_new) == sorted(set(NEW_FORMS) - {"dropout_at_eval"})


# -- each variant applies to a task of each kind, or says why not -------------------------


@pytest.mark.parametrize("kind", KIND_TASKS)
def test_every_variant_applies_or_says_why_not_on_each_kind(kind: str) -> None:
    task = KIND_TASKS[kind]
    conditions, skipped = variant_conditions(task)
    assert sorted([c.name for c in conditions] + list(skipped)) == sorted(variant_ids())
    assert all(why.strip() and "\n" not in why for why in skipped.values())
    for ident, why in skipped.items():
        with pytest.raises(FaultbenchError, match=re.escape(why)):
            condition(ident).apply(base_setup(task, 0))
    for cond in conditions:  # each applies: its transform runs on the task's recipe
        assert isinstance(cond.apply(base_setup(task, 0)), Recipe)


#: Per kind: the faults none of whose variants can apply there (the language model's six
#: are sequence bugs everywhere else).
LANGUAGE = {
    "labels_not_shifted",
    "causal_mask_missing",
    "unmasked_loss",
    "loss_normalization",
    "resume_without_state",
    "leaky_split",
}
NO_FORM = {
    "binary": LANGUAGE | {"raw_targets", "broadcast_targets", "dropout_at_eval"},
    "multilabel": LANGUAGE | {"raw_targets", "broadcast_targets", "dropout_at_eval"},
    "two_inputs": LANGUAGE | {"inverted_pos_weight", "dropout_at_eval"},
    "reconstruction": LANGUAGE
    | {"label_mismatch", "sorted_classes", "shuffled_targets", "label_noise", "raw_targets"}
    | {"broadcast_targets", "inverted_pos_weight", "dropout_at_eval"},
}


@pytest.mark.parametrize("kind", KIND_TASKS)
def test_each_kind_has_a_form_of_every_fault_that_makes_sense_there(kind: str) -> None:
    task = KIND_TASKS[kind]
    faults = [find(name)[0] for name in [*FAULTS.names(), *HELD_OUT.names()]]
    none_apply = {
        f.name for f in faults if all(inapplicable(f.variant_id(v), task) for v in f.variants)
    }
    assert none_apply == NO_FORM[kind]


#: A classic form on another kind names the form the bug takes there.
OTHER_FORM = [
    ("label_mismatch", "binary", "label_mismatch.positive_flipped"),
    ("label_mismatch.two_encoders", "multilabel", "label_mismatch.label_columns"),
    ("label_mismatch.swapped", "two_inputs", "label_mismatch.misaligned"),
    ("label_mismatch", "reconstruction", "its own inputs"),
    ("softmax_before_loss", "binary", "softmax_before_loss.sigmoid_logits"),
    ("softmax_before_loss.nll_of_probs", "multilabel", "softmax_before_loss.sigmoid_logits"),
    ("softmax_before_loss", "two_inputs", "softmax_before_loss.sigmoid_output or .relu_output"),
    ("softmax_before_loss.sigmoid_logits", "reconstruction", ".sigmoid_output or .relu_output"),
    ("frozen_layer.embedding", "two_inputs", "frozen_layer.code_table"),
    ("label_noise", "binary", "label_noise.flipped"),
    ("label_noise", "two_inputs", "label_noise.wrong_rows"),
    ("huge_inputs", "reconstruction", "scaled by one factor together"),
    ("broadcast_targets", "binary", "BCEWithLogitsLoss refuses targets of another shape"),
    ("raw_targets", "reconstruction", "huge_inputs"),
    ("dead_units.negative_init", "two_inputs", "codes' embeddings, which are signed"),
]


@pytest.mark.parametrize(("ident", "kind", "names"), OTHER_FORM)
def test_a_form_that_cannot_apply_names_the_kinds_form(ident: str, kind: str, names: str) -> None:
    assert names in inapplicable(ident, KIND_TASKS[kind])


def test_where_a_form_depends_on_the_data_it_says_so() -> None:
    # Targets in [0, 1] (pixels): a sigmoid head and a ReLU head can reach them all.
    rng = _rng(5)
    X = rng.uniform(0.0, 1.0, size=(200, 6))
    pixels = Task.from_arrays("kinds-pixels", X, kind="reconstruction", normalize=False)
    assert "not a bug" in inapplicable("softmax_before_loss.sigmoid_output", pixels)
    assert "not a bug" in inapplicable("softmax_before_loss.relu_output", pixels)
    # Labels a third positive: nobody weights them, so none gets the weight backwards.
    even = Task.from_arrays("kinds-even", X, (X[:, 0] > 0.65).astype(int), kind="binary")
    assert "nearly even" in inapplicable("inverted_pos_weight", even)
    # A recommender of codes alone has no number to scale.
    codes = rng.integers(0, 10, size=(200, 2))
    only_codes = Task.from_arrays("kinds-codes", np.zeros((200, 0)), X[:, 0], codes=codes)
    for ident in ("huge_inputs", "huge_inputs.unstandardized"):
        assert "only inputs are categorical codes" in inapplicable(ident, only_codes)


# -- each new form does what its summary says ---------------------------------------------


def _applied(ident: str, kind: str) -> tuple[Recipe, Recipe]:
    healthy = base_setup(KIND_TASKS[kind], 0)
    return healthy, condition(ident).apply(healthy)


def test_positive_flipped_encodes_validation_the_other_way() -> None:
    healthy, faulty = _applied("label_mismatch.positive_flipped", "binary")
    assert np.array_equal(faulty.y_train, healthy.y_train)
    assert np.array_equal(faulty.y_val, 1.0 - healthy.y_val)


def test_label_columns_are_numbered_by_validations_own_encoder() -> None:
    healthy, faulty = _applied("label_mismatch.label_columns", "multilabel")
    # A label binarizer fitted on validation's label sets, in order of first appearance.
    order: list[int] = []
    for row in healthy.y_val:
        order += [j for j in np.flatnonzero(row) if j not in order]
    order += [j for j in range(healthy.y_val.shape[1]) if j not in order]
    assert order != sorted(order)
    for k, label in enumerate(order):
        assert np.array_equal(faulty.y_val[:, k], healthy.y_val[:, label])


def test_misaligned_validation_targets_are_the_next_rows() -> None:
    healthy, faulty = _applied("label_mismatch.misaligned", "two_inputs")
    assert np.array_equal(faulty.y_val[:-1], healthy.y_val[1:])
    assert np.array_equal(faulty.y_val[-1], healthy.y_val[0])
    assert np.array_equal(faulty.X_val, healthy.X_val) and faulty.codes_val is healthy.codes_val


@pytest.mark.parametrize(
    ("ident", "kind", "low", "high"),
    [
        ("softmax_before_loss.sigmoid_logits", "binary", 0.0, 1.0),
        ("softmax_before_loss.sigmoid_output", "two_inputs", 0.0, 1.0),
        ("softmax_before_loss.relu_output", "two_inputs", 0.0, np.inf),
    ],
)
def test_an_output_head_bounds_what_the_model_says(
    ident: str, kind: str, low: float, high: float
) -> None:
    healthy, faulty = _applied(ident, kind)
    inputs = inputs_of(healthy, healthy.X_train, healthy.codes_train)
    with torch.no_grad():
        plain, headed = call(build_model(healthy), inputs), call(build_model(faulty), inputs)
    assert plain.shape == headed.shape and (plain < low).any()
    assert bool(((headed >= low) & (headed <= high)).all())
    assert faulty.loss is healthy.loss  # the loss still expects logits, or any value


def test_the_code_table_is_left_out_of_the_optimizer() -> None:
    _, faulty = _applied("frozen_layer.code_table", "two_inputs")
    model = build_model(faulty)
    users = model.get_submodule("codes").tables[0]  # 20 users, 15 items: the largest
    updated = {id(p) for g in faulty.param_groups(model, faulty) for p in g["params"]}
    assert id(users.weight) not in updated
    assert updated | {id(users.weight)} == {id(p) for p in model.parameters()}


def test_flipped_labels_flip_the_share_asked() -> None:
    healthy = base_setup(KIND_TASKS["multilabel"], 0)
    faulty = condition(("label_noise.flipped", 0.3)).apply(healthy)
    flipped = faulty.y_train != healthy.y_train
    assert np.array_equal(faulty.y_train[flipped], 1.0 - healthy.y_train[flipped])
    assert flipped.mean() == pytest.approx(0.3, abs=0.02)


def test_wrong_rows_give_a_share_of_rows_another_rows_target() -> None:
    healthy = base_setup(KIND_TASKS["two_inputs"], 0)
    faulty = condition(("label_noise.wrong_rows", 0.5)).apply(healthy)
    moved = (faulty.y_train != healthy.y_train).ravel()
    assert moved.mean() == pytest.approx(0.5, abs=0.04)
    # The same targets, dealt to other rows: none is invented.
    assert np.array_equal(np.sort(faulty.y_train, axis=0), np.sort(healthy.y_train, axis=0))


def test_raw_targets_have_the_spread_asked_around_a_positive_mean() -> None:
    healthy = base_setup(KIND_TASKS["two_inputs"], 0)
    faulty = condition(("raw_targets", 100.0)).apply(healthy)
    assert float(healthy.y_train.std()) == pytest.approx(1.0, rel=1e-3)  # standardized
    assert float(faulty.y_train.std()) == pytest.approx(100.0, rel=1e-3)
    assert float(faulty.y_train.mean()) == pytest.approx(200.0, rel=1e-3)
    np.testing.assert_allclose(
        np.corrcoef(faulty.y_val[:, 0], healthy.y_val[:, 0])[0, 1], 1.0, rtol=1e-6
    )


def test_flat_targets_make_the_loss_compare_every_pair() -> None:
    healthy, faulty = _applied("broadcast_targets", "two_inputs")
    assert faulty.y_train.shape == (len(healthy.y_train),)
    out = torch.randn(8, 1)
    y = torch.from_numpy(faulty.y_train[:8])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loss = faulty.loss(out, y)
    assert any("target size" in str(w.message) for w in seen)  # torch says so, and goes on
    pairs = ((out - y[None, :]) ** 2).mean()  # every prediction against every target
    assert float(loss) == pytest.approx(float(pairs), rel=1e-6)


def test_inverted_pos_weight_weighs_each_label_by_its_own_odds() -> None:
    healthy, faulty = _applied("inverted_pos_weight", "multilabel")
    p = healthy.y_train.mean(axis=0)
    out, y = torch.randn(16, 5), torch.from_numpy(healthy.y_train[:16])
    weight = torch.from_numpy(p / (1 - p)).float()  # positives over negatives
    by_hand = -(weight * y * F.logsigmoid(out) + (1 - y) * F.logsigmoid(-out)).mean()
    assert float(faulty.loss(out, y)) == pytest.approx(float(by_hand), rel=1e-5)
    assert (p < 0.5).all() and bool((weight < 1).all())  # the rare labels weighted down


def test_dropout_at_eval_scores_a_random_thinning_of_the_model() -> None:
    task, design = _dropout_base()
    healthy = base_setup(task, 0, design)
    faulty = condition("dropout_at_eval").apply(healthy)
    model = build_model(healthy).eval()
    right, wrong = healthy.make_scorer(healthy), faulty.make_scorer(faulty)
    assert right(model) == right(model)
    assert wrong(model) != wrong(model)  # each call draws its own dropout masks
    assert not model.training  # and the model is left as the loop put it


# -- the faults that read or feed the inputs take a model of two inputs --------------------


def test_dead_units_are_dead_on_a_two_input_model() -> None:
    faulty = condition(("dead_units", 0.9)).apply(base_setup(KIND_TASKS["two_inputs"], 0))
    model = build_model(faulty).eval()
    layer = model.get_submodule(faulty.pick_hidden("dead_units"))
    seen: list[torch.Tensor] = []
    layer.register_forward_hook(lambda _m, _i, out: seen.append(out))
    with torch.no_grad():
        call(model, inputs_of(faulty, faulty.X_train, faulty.codes_train))
    dead = round(0.9 * seen[0].shape[1])
    assert bool((seen[0][:, :dead] < 0).all()) and bool((seen[0][:, dead:] > 0).any())


@pytest.mark.parametrize("ident", ["starved_loader.slow_dataset", "sorted_classes"])
def test_a_loader_fault_yields_both_inputs(ident: str) -> None:
    recipe = condition(ident).apply(base_setup(KIND_TASKS["two_inputs"], 0))
    (codes, X), y = next(recipe.loader(recipe))
    assert codes.dtype == torch.int64 and codes.shape == (recipe.batch_size, 2)
    assert X.shape == (recipe.batch_size, 3) and y.shape == (recipe.batch_size, 1)
    rows = [int(np.flatnonzero((recipe.X_train == x.numpy()).all(axis=1))[0]) for x in X]
    assert np.array_equal(codes.numpy(), recipe.codes_train[rows])  # each row's own codes
    assert np.array_equal(y.numpy(), recipe.y_train[rows])
    if ident == "sorted_classes":
        assert np.array_equal(y.numpy().ravel(), np.sort(recipe.y_train.ravel())[: len(y)])


def test_huge_inputs_scale_an_autoencoders_targets_with_its_inputs() -> None:
    task = KIND_TASKS["reconstruction"]
    sgd = task.reference_design().replace(optimizer="sgd")  # Adam would hide it (see why-not)
    healthy = base_setup(task, 0, sgd)
    faulty = condition("huge_inputs").apply(healthy)
    np.testing.assert_allclose(faulty.X_train, healthy.X_train * 1000, rtol=1e-6)
    assert np.array_equal(faulty.y_train, faulty.X_train)
    two = condition("huge_inputs").apply(base_setup(KIND_TASKS["two_inputs"], 0))
    assert two.codes_train is KIND_TASKS["two_inputs"].codes_train  # indices are not scaled


# -- each new form shows against healthy runs in every seed --------------------------------

Grid = dict[tuple[str, str, int], RunRecord]


def _key(task: Task, design: Design | None) -> str:
    return task.name if design is None else f"{task.name}.{design.digest}"


@pytest.fixture(scope="module")
def kinds_grid(shared_store_root: Path, trainer: SerialEngine) -> Grid:
    """(base, condition, seed) -> record: every new form on its base, and healthy seeds."""
    store, grid = Store(shared_store_root), {}
    for task, design in BASES:
        faulty = [
            RunSpec(task.name, task.fingerprint, condition(ident), s, design)
            for ident in NEW_FORMS
            if _base_for(ident) == (task, design)
            for s in range(SIGNAL_SEEDS)
        ]
        healthy = [
            RunSpec(task.name, task.fingerprint, Condition(), s, design)
            for s in range(HEALTHY_REFERENCE)
        ]
        for spec, record, _ in ensure_records(healthy + faulty, task, store=store, engine=trainer):
            grid[(_key(task, design), spec.condition.name, spec.seed)] = record
    return grid


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SIGNAL_SEEDS))
@pytest.mark.parametrize("ident", NEW_FORMS)
def test_new_form_shows_in_every_seed(ident: str, seed: int, kinds_grid: Grid) -> None:
    base = _key(*_base_for(ident))
    record = kinds_grid[(base, condition(ident).name, seed)]
    assert record.ok and record.trace and record.config, record.error
    healthy = [kinds_grid[(base, "healthy", s)] for s in range(HEALTHY_REFERENCE)]
    reference = [(r.trace, r.config) for r in healthy if r.trace and r.config]
    assert manifestation(record.trace, record.config, reference).visible is True, (ident, seed)


#: What a healthy run of each base scores at least on validation (its kind's metric).
TRAINS_TO = {
    "kinds-binary": ("val_auc", 0.8),  # a fifth positive: accuracy's chance is 0.8
    "kinds-multilabel": ("val_f1", 0.8),
    "kinds-ratings": ("val_r2", 0.9),
    "cancer": ("val_accuracy", 0.9),
    "tags": ("val_f1", 0.6),
    "diabetes": ("val_r2", 0.25),  # as much as a linear model gets
    "churn": ("val_accuracy", 0.8),
    "digits": ("val_accuracy", 0.85),
}


@pytest.mark.slow
def test_the_healthy_bases_train_well(kinds_grid: Grid) -> None:
    for task, design in BASES:
        metric, least = TRAINS_TO[task.name]
        for s in range(HEALTHY_REFERENCE):
            trace = kinds_grid[(_key(task, design), "healthy", s)].trace
            assert trace is not None
            value = trace.val_acc if metric == "val_accuracy" else trace.metrics[metric]
            assert value[-1] >= least, (task.name, s, metric, value[-1])
