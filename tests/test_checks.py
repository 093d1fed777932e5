"""The conformance checker: every shipped diagnoser passes, broken ones fail clearly."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator

import pytest

from faultbench.cli.main import main
from faultbench.core.errors import FaultbenchError
from faultbench.scoring.diagnosis import Diagnosis, diagnoser_names, get_diagnoser
from faultbench.scoring.run import Run
from faultbench.tools.checks import CHECKS, CheckFailed, check_ignores_condition, run_checks

# A learned diagnoser (one with a ``prepare``) trains its own runs on first use, minutes here:
# each is checked in its own module on a small training set (test_learned.py,
# test_defaultdiag.py).
LEARNED = ("learned", "default-port")
SHIPPED = [name for name in diagnoser_names() if name not in LEARNED]


def test_every_diagnoser_with_its_own_training_runs_is_checked_elsewhere() -> None:
    from faultbench.scoring.contract import contract_of

    trains = {n for n in diagnoser_names() if contract_of(get_diagnoser(n)).prepare is not None}
    assert trains == set(LEARNED)


class ReadsTheStore:
    """Cheats: looks the run up in the default store to read its condition."""

    name = "reads-the-store"
    tuned_on: frozenset[str] = frozenset()

    def diagnose(self, run: Run) -> Diagnosis:
        from faultbench.storage.store import Store

        for record in Store().records():
            if record.spec.seed == run.seed:
                return Diagnosis(record.spec.condition.name)
        return Diagnosis("healthy")


class Inventive:
    """Answers a label no condition has."""

    name = "inventive"
    tuned_on: frozenset[str] = frozenset()

    def diagnose(self, run: Run) -> Diagnosis:
        return Diagnosis("cosmic_rays")


class ChokesOnNan:
    """Raises on a diverged run."""

    name = "chokes-on-nan"
    tuned_on: frozenset[str] = frozenset()

    def diagnose(self, run: Run) -> Diagnosis:
        if not all(v == v for v in run.trace.loss):
            raise ValueError("nan loss")
        return Diagnosis("healthy")


class Moody:
    """Answers differently each time."""

    name = "moody"
    tuned_on: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.calls = 0

    def diagnose(self, run: Run) -> Diagnosis:
        self.calls += 1
        return Diagnosis("healthy" if self.calls % 2 else "lr_too_high")


@pytest.fixture
def broken_module() -> Iterator[str]:
    module = types.ModuleType("faultbench_test_broken")
    module.Inventive = Inventive  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_diagnoser_passes_every_check(name: str) -> None:
    results = run_checks(name)
    assert [r.name for r in results] == [c.__name__ for c in CHECKS]
    assert all(r.passed for r in results), [r for r in results if not r.passed]


@pytest.mark.parametrize(
    ("diagnoser", "failing"),
    [
        (
            Inventive(),
            {
                "check_returns_diagnosis",
                "check_known_labels",
                "check_ignores_condition",
                "check_deterministic",
                "check_handles_diverged_run",
            },
        ),
        (ChokesOnNan(), {"check_handles_diverged_run"}),
        (Moody(), {"check_deterministic", "check_ignores_condition"}),
        (ReadsTheStore(), {"check_ignores_condition"}),
    ],
    ids=lambda v: getattr(v, "name", ""),
)
def test_broken_diagnoser_fails_the_right_checks(diagnoser, failing: set[str]) -> None:
    results = {r.name: r for r in run_checks(diagnoser)}
    failed = {name for name, r in results.items() if not r.passed}
    assert failing <= failed
    assert "check_interface" not in failed
    assert all(results[name].message for name in failed)


def test_cheater_is_caught_with_the_decoys_named() -> None:
    with pytest.raises(CheckFailed, match=re.escape("decoy condition it must not see")):
        check_ignores_condition(ReadsTheStore())


def test_not_a_diagnoser_fails_the_interface_check_only() -> None:
    class Nameless:
        tuned_on: frozenset[str] = frozenset()

        def diagnose(self, run: Run) -> Diagnosis:
            return Diagnosis("healthy")

    results = run_checks(Nameless())  # type: ignore[arg-type]
    assert [(r.name, r.passed) for r in results] == [("check_interface", False)]


def test_cli_passes_a_shipped_diagnoser(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "always-healthy"]) == 0
    out = capsys.readouterr().out
    assert "always-healthy: all 6 checks passed" in out
    assert out.count("PASS ") == len(CHECKS)


def test_cli_fails_a_broken_diagnoser(
    broken_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", f"{broken_module}:Inventive"]) == 1
    out = capsys.readouterr().out
    assert "FAIL check_known_labels: " in out
    assert "unknown label 'cosmic_rays'" in out
    assert "checks failed: " in out


def test_cli_bad_name_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "rulez"]) == 2
    assert "Unknown diagnoser 'rulez'. Did you mean 'rules'?" in capsys.readouterr().err


def test_bad_name_raises_for_library_use() -> None:
    with pytest.raises(FaultbenchError, match=re.escape("Unknown diagnoser 'rulez'")):
        get_diagnoser("rulez")
