"""The grids a diagnoser is scored on: which conditions, at which severity level.

- ``full`` (the default): healthy; every known fault's every variant at each of
  its calibrated levels (:mod:`faultbench.faults.levels`), or at its one form
  when it has no knob; and every held-out fault at its canonical severity. A
  variant the calibration found on fewer than most of the task's drawn bases
  (level ``hidden``: the task's designs mask it) is left out, and the report says so.
- ``classic``: healthy and the nine faults in their original form at their
  canonical severities: the reference comparison of earlier reports.

``faults``, ``variants`` and ``levels`` select parts of either grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from faultbench.core.errors import unknown_name
from faultbench.faults.fault import (
    FAULTS,
    HEALTHY,
    HELD_OUT,
    Condition,
    canonical_conditions,
    condition,
    find,
    inapplicable,
    variant_ids,
)
from faultbench.faults.levels import CANONICAL, FIXED, LEVELS, hidden_on, levels_for
from faultbench.tasks.task import Task

GRIDS = ("full", "classic")


@dataclass(frozen=True)
class GridPoint:
    """One condition of a grid, with what it is an instance of."""

    condition: Condition  # what the run has
    variant: str  # ``fault.variant`` ('' for healthy)
    level: str  # mild, moderate, severe, canonical, fixed, or '' for healthy
    grid: str  # the grid it belongs to


def check_selection(
    grid: str = "full",
    faults: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    levels: Sequence[str] | None = None,
) -> None:
    """Raise one clear error for an unknown grid, fault, variant or level."""
    if grid not in GRIDS:
        raise unknown_name("grid", grid, GRIDS)
    known = [HEALTHY, *FAULTS.names(), *HELD_OUT.names()]
    for name in faults or ():
        if name not in known:
            raise unknown_name("fault", name, known)
    ids = variant_ids()
    for name in variants or ():
        if name not in ids and not any(i.endswith(f".{name}") for i in ids):
            raise unknown_name("variant", name, ids)
    valid_levels = [*LEVELS, CANONICAL, FIXED]
    for name in levels or ():
        if name not in valid_levels:
            raise unknown_name("level", name, valid_levels)


def grid_points(
    task: Task,
    grid: str = "full",
    *,
    faults: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    levels: Sequence[str] | None = None,
) -> list[GridPoint]:
    """The points of ``grid`` on ``task`` that the selection keeps, healthy first.

    Args:
        task: The task; variants it declares inapplicable are left out.
        grid: "full" or "classic".
        faults: Keep these faults (and ``healthy``) only; all when None.
        variants: Keep these variants (``fault.variant``, or the bare variant
            name; a classic fault's one form is its bare fault name).
        levels: Keep these levels only (healthy is always kept).

    Raises:
        FaultbenchError: an unknown grid, fault, variant or level.
    """
    check_selection(grid, faults, variants, levels)
    points = [GridPoint(Condition(), "", "", grid)]
    if grid == "classic":
        points += [
            GridPoint(cond, cond.name, CANONICAL, grid)
            for cond in canonical_conditions(task=task)
            if cond.name != HEALTHY
        ]
    else:
        points += _full_points(task)
    return [p for p in points if _kept(p, faults, variants, levels)]


def _full_points(task: Task) -> list[GridPoint]:
    out = []
    hidden = hidden_on(task.name)  # masked by the task's designs (measured): not a fault there
    for ident in variant_ids():
        if inapplicable(ident, task) or ident in hidden:
            continue
        fault, variant = find(ident)
        calibrated = levels_for(task.name, ident) if fault.name in FAULTS.names() else {}
        if variant.severity is None:
            out.append(GridPoint(condition(ident), ident, FIXED, "full"))
        elif calibrated:
            out += [
                GridPoint(condition((ident, value)), ident, level, "full")
                for level, value in calibrated.items()
            ]
        else:  # held-out faults, and a knob with no level visible on this task
            out.append(GridPoint(condition(ident), ident, CANONICAL, "full"))
    return out


def _kept(
    point: GridPoint,
    faults: Sequence[str] | None,
    variants: Sequence[str] | None,
    levels: Sequence[str] | None,
) -> bool:
    if not point.variant:
        return True  # healthy: every score needs it (false alarms, the manifestation check)
    fault, _, name = point.variant.partition(".")
    if faults and fault not in faults:
        return False
    if variants and point.variant not in variants and (not name or name not in variants):
        return False
    return not levels or point.level in levels
