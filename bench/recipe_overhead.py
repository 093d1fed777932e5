"""Does the recipe's indirection slow the loop? The bare loop against the same loop written flat.

``train(recipe, record=False, evaluate=False)`` calls the recipe's parts (the
loss, clear, clip and update functions, the loader, the factories); the flat
loop below is the loop as it was before the recipe, with the healthy parts
written in line. Both train healthy digits for 600 steps, interleaved in one
process, one thread; the figure is the median ratio of their times per round.
They compute the same numbers, which the script checks before timing.

    .venv/bin/python bench/recipe_overhead.py --rounds 40
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults.architectures import body
from faultbench.faults.recipe import BatchStream, Recipe, base_setup, standard_model
from faultbench.tasks.task import get_task
from faultbench.training.loop import train


def flat_loop(r: Recipe) -> nn.Module:
    """The pre-recipe bare loop: the healthy parts in line, no function per part."""
    torch.manual_seed(r.seed)
    features, classes = r.X_train.shape[1], r.n_classes
    model = nn.Sequential(
        body("mlp", n_features=features, n_classes=classes, widths=(r.hidden,), image_side=0)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=r.lr)
    stream = iter(BatchStream(r.X_train, r.y_train, batch_size=r.batch_size, seed=r.seed))
    for _ in range(r.steps):
        xb, yb = next(stream)
        loss = F.cross_entropy(model(xb), yb)
        model.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def recipe_loop(r: Recipe) -> None:
    """The benchmark's bare loop over the recipe's parts."""
    train(r, record=False, evaluate=False)


def _timed(fn: Callable[[Recipe], object], recipe: Recipe) -> float:
    start = time.thread_time()
    fn(recipe)
    return time.thread_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    recipe = base_setup(get_task("digits"), 0)
    _check_same_numbers(recipe.replace(steps=50))
    times: dict[str, list[float]] = {"flat": [], "recipe": []}
    for fn in (flat_loop, recipe_loop):  # warm caches and lazy imports
        fn(recipe)
    for _ in range(args.rounds):
        times["flat"].append(_timed(flat_loop, recipe))
        times["recipe"].append(_timed(recipe_loop, recipe))
    ratios = [b / a for a, b in zip(times["flat"], times["recipe"])]
    per_step = {k: statistics.median(v) / recipe.steps * 1e6 for k, v in times.items()}
    print(f"healthy digits, {recipe.steps} steps, {args.rounds} interleaved rounds (CPU time)")
    print(f"  flat loop    {per_step['flat']:.1f} us per step")
    print(f"  recipe loop  {per_step['recipe']:.1f} us per step")
    low, _, high = statistics.quantiles(ratios, n=4)
    print(
        f"  recipe / flat: median {statistics.median(ratios):.3f} (quartiles {low:.3f}-{high:.3f})"
    )


def _check_same_numbers(recipe: Recipe) -> None:
    """Both loops end at the same weights: the comparison is of one computation."""
    trained: list[nn.Module] = []

    def kept(r: Recipe) -> nn.Module:
        trained.append(standard_model(r))
        return trained[-1]

    recipe_loop(recipe.replace(make_model=kept))
    for a, b in zip(flat_loop(recipe).parameters(), trained[0].parameters(), strict=True):
        assert torch.equal(a, b), "the two loops compute different numbers"


if __name__ == "__main__":
    main()
