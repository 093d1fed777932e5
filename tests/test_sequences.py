"""Sequence tasks' data: labels of the answer only, splits by source unit, fingerprints."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from faultbench.core.errors import FaultbenchError
from faultbench.tasks.design import Design, Family, Network
from faultbench.tasks.sequences import (
    IGNORE,
    SPECIALS,
    encode,
    labels_where,
    next_token_labels,
    split_by_unit,
)
from faultbench.tasks.task import Task, TrainDefaults, get_task

VOCAB = (*SPECIALS, "a", "b", "=", "x", "y")


def test_next_token_labels_count_the_answer_and_its_end_only() -> None:
    # <bos> a b = x y <eos> <pad>: prompt of 4 (<bos> a b =), length 7.
    X = np.array([[1, 3, 4, 5, 6, 7, 2, 0]])
    labels = next_token_labels(X, np.array([4]), np.array([7]))
    assert labels.tolist() == [[IGNORE, IGNORE, IGNORE, 6, 7, 2, IGNORE, IGNORE]]


def test_labels_where_never_reads_past_the_context() -> None:
    X = np.arange(5)[None, :]
    labels = labels_where(X, first=np.array([0]), stop=np.array([5]), shift=1)
    assert labels.tolist() == [[1, 2, 3, 4, IGNORE]]


def test_encode_pads_counts_truncation_and_refuses_unknown_words() -> None:
    X, prompts, lengths, _, cut = encode(
        [(("a", "="), ("x",), 0), (("a", "b", "b", "="), ("x", "y"), 1)], VOCAB, context=6
    )
    assert X.tolist() == [[1, 3, 5, 6, 2, 0], [1, 3, 4, 4, 5, 6]]
    assert prompts.tolist() == [3, 5] and lengths.tolist() == [5, 6] and cut == 1
    with pytest.raises(ValueError, match="not in the vocabulary"):
        encode([(("zz",), ("x",), 0)], VOCAB, context=6)


def test_a_split_by_unit_keeps_each_unit_on_one_side() -> None:
    units = np.repeat(np.arange(50), 3)
    train, val = split_by_unit(units, val_fraction=0.2, seed=0)
    assert sorted([*train, *val]) == list(range(150))
    assert not set(units[train]) & set(units[val]) and len(set(units[val])) == 10
    assert not (np.diff(train) > 0).all()  # in a random order: the first rows are a sample


def _task(name: str = "tiny") -> Task:
    examples = [(("a",) * (1 + i % 3) + ("=",), ("x", "y")[: 1 + i % 2], i // 2) for i in range(40)]
    net = Network("transformer", widths=(16, 16), activation="gelu", norm="layer", heads=2)
    return Task.from_sequences(
        name,
        examples,
        VOCAB,
        context=8,
        defaults=TrainDefaults(architecture="transformer", hidden=16, steps=10),
        reference=Design(network=net, optimizer="adam", lr=1e-3, batch_size=4),
        family=Family("transformer", depths=(2,), widths=(16,), heads=(2,)),
    )


def test_a_sequence_task_holds_its_prompts_and_units() -> None:
    task = _task()
    seq = task.sequences
    assert seq is not None and task.n_classes == len(VOCAB) and task.X_train.shape[1] == 8
    assert task.y_train.shape == task.X_train.shape
    assert not set(seq.units_train.tolist()) & set(seq.units_val.tolist())
    assert seq.decode(task.X_train[0])[0] == "<bos>"
    assert task.reference_design().network.widths == (16, 16)


def test_the_fingerprint_hashes_the_sequences_and_the_transformer_axes() -> None:
    a, b = _task(), _task()
    assert a.fingerprint == b.fingerprint
    other = dataclasses.replace(a, family=Family("transformer", depths=(2,), widths=(16,)))
    assert other.fingerprint != a.fingerprint  # heads (2, 4) by default, not (2,)


@pytest.mark.parametrize("name", ["digits", "synthetic"])
def test_a_classifier_tasks_fingerprint_is_what_it_was(name: str) -> None:
    """The formula before sequence tasks: arrays, then name, classes, defaults and family."""
    task = get_task(name)
    digest = hashlib.sha256()
    for arr in (task.X_train, task.y_train, task.X_val, task.y_val):
        digest.update(np.ascontiguousarray(arr).tobytes())
    digest.update(repr((task.name, task.classes, task.defaults, task.design_family())).encode())
    assert task.fingerprint == digest.hexdigest()[:16]
    assert "heads" not in repr(task.design_family())  # the transformer axis stays out of repr


def test_a_vocabulary_must_start_with_the_specials() -> None:
    with pytest.raises(FaultbenchError, match="must start with"):
        Task.from_sequences(
            "bad",
            [(("a",), ("x",), 0)] * 12,
            ("a", "x", *SPECIALS),
            context=5,
            defaults=TrainDefaults(architecture="transformer"),
            reference=Design(Network("transformer"), "adam", 1e-3, 4),
            family=Family("transformer"),
        )
