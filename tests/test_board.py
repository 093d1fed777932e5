"""Which evaluations the board holds for a diagnoser, by what it declares."""

from __future__ import annotations

from faultbench.scoring.board import REALBUGS, Board
from faultbench.scoring.contract import Contract, contract_of, problems
from faultbench.scoring.diagnosis import get_diagnoser

BOARD = Board(("digits", "shapes"), ("digits", "shapes"))


def test_a_healthy_only_subset_is_the_classic_grids_first_seed_and_five_healthy_drawn_runs():
    contract = Contract("tc", frozenset(), subset_seeds=1, subset_full_grid="healthy")
    found = BOARD.evaluations("tc", contract)
    classic = [ev for ev in found if ev.grid == "classic"]
    full = [ev for ev in found if ev.grid == "full"]
    assert [(ev.task, ev.seeds) for ev in classic] == [("digits", 1), ("shapes", 1)]
    assert {(ev.faults, ev.healthy_seeds, ev.prefix) for ev in full} == {(("healthy",), 5, 1.0)}
    assert len(full) == 4  # both tasks, at both samplings: no prefix
    assert [ev.grid for ev in found].count(REALBUGS) == 1
    assert "seed 0 of the classic grid (its identification), 5 healthy drawn runs" in (
        BOARD.subset_text(contract)
    )


def test_a_subset_of_every_cell_keeps_the_full_grids_faults_and_prefixes():
    contract = Contract("live", frozenset(), subset_seeds=1)
    full = [ev for ev in BOARD.evaluations("live", contract) if ev.grid == "full"]
    assert {ev.faults for ev in full} == {None} and {ev.healthy_seeds for ev in full} == {10}
    assert sorted({ev.prefix for ev in full}) == [0.1, 0.25, 0.5, 1.0]


def test_traincheck_declares_the_healthy_only_subset():
    class Declared:
        name, tuned_on, subset_seeds, subset_full_grid = "x", frozenset(), 1, "half"

        def diagnose(self, run: object) -> None:
            return None

    assert problems(Declared()) == [
        "diagnoser 'x': 'subset_full_grid' must be one of 'all', 'healthy'; got 'half' "
        "(with subset_seeds, what of the full grid it is scored on)"
    ]
    traincheck = contract_of(get_diagnoser("traincheck"))
    assert traincheck.subset_seeds == 1 and traincheck.subset_full_grid == "healthy"
