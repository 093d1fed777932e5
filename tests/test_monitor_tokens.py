"""Monitor.step with a language model's (N, T, V) logits and (N, T) labels: accuracy over the
counted tokens only, the share counted, and the padding a mask shows."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

from faultbench.core.errors import FaultbenchError
from faultbench.training.monitor import Monitor

IGNORE = -100


def _monitor() -> tuple[Monitor, nn.Module]:
    model = nn.Linear(2, 2)
    return Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), every=1), model


def _logits(predicted: list[list[int]], vocab: int = 5) -> torch.Tensor:
    """One-hot logits whose argmax at each position is ``predicted``."""
    return torch.nn.functional.one_hot(torch.tensor(predicted), vocab).float()


def test_token_accuracy_counts_only_the_counted_tokens() -> None:
    monitor, _ = _monitor()
    # 2 sequences x 4 positions; 5 positions counted, of which 3 predicted right.
    predicted = [[1, 2, 3, 4], [0, 0, 1, 1]]
    labels = torch.tensor([[IGNORE, 2, 0, 4], [IGNORE, IGNORE, 1, 3]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    monitor.step(torch.tensor(0.5), _logits(predicted), labels, mask=mask)
    trace = monitor.trace()
    assert trace.batch_acc.tolist() == [3 / 5]  # right: 2, 4 | 1; wrong: 0 | 3
    assert trace.counted_share.tolist() == [5 / 8]
    assert trace.padding_share.tolist() == [1 / 8]
    assert trace.padding_counted_share.tolist() == [1.0]  # the one padded position counted


def test_without_a_mask_no_padding_is_reported_and_a_classifier_is_unchanged() -> None:
    monitor, _ = _monitor()
    monitor.step(torch.tensor(1.0), _logits([[1, 1, 2]]), torch.tensor([[1, IGNORE, 0]]))
    monitor.step(torch.tensor(1.0), torch.tensor([[0.1, 0.9], [0.8, 0.2]]), torch.tensor([1, 1]))
    monitor.step(torch.tensor(1.0))
    trace = monitor.trace()
    assert trace.batch_acc[:2].tolist() == [0.5, 0.5] and np.isnan(trace.batch_acc[2])
    assert trace.counted_share[:2].tolist() == [2 / 3, 1.0]
    assert np.isnan(trace.padding_share).all() and np.isnan(trace.padding_counted_share).all()


def test_no_padding_in_a_masked_batch_leaves_the_counted_share_of_padding_undefined() -> None:
    monitor, _ = _monitor()
    labels = torch.tensor([[1, 2]])
    monitor.step(torch.tensor(1.0), _logits([[1, 2]]), labels, mask=torch.ones(1, 2))
    trace = monitor.trace()
    assert trace.padding_share.tolist() == [0.0] and np.isnan(trace.padding_counted_share[0])


def test_a_mask_of_another_shape_or_without_targets_is_refused() -> None:
    monitor, _ = _monitor()
    labels = torch.tensor([[1, 2]])
    with pytest.raises(FaultbenchError, match=re.escape("mask of shape (1, 3)")):
        monitor.step(torch.tensor(1.0), _logits([[1, 2]]), labels, mask=torch.ones(1, 3))
    with pytest.raises(FaultbenchError, match="needs the output and target"):
        monitor.step(torch.tensor(1.0), mask=torch.ones(1, 2))
