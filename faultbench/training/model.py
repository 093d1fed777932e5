"""Builds a recipe's model: the same weights every time for the same seed."""

from __future__ import annotations

import torch
from torch import nn

from faultbench.faults.recipe import Recipe


def build_model(recipe: Recipe) -> nn.Module:
    """The recipe's model, initialized from ``recipe.seed``.

    Building twice from the same recipe gives the same weights, which is what
    lets a probe rebuild the run's model without storing it.
    """
    torch.manual_seed(recipe.seed)
    return recipe.make_model(recipe)
