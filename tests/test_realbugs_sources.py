"""Each case held to its source (issue 51): its source check, no unfinished text, every
departure of the fixed twin declared and counted, and the README's table made from them
(faultbench.realbugs.case, faultbench.realbugs.readme)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from test_realbugs_case import CHECK, module

from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import labels
from faultbench.realbugs import Case, all_cases
from faultbench.realbugs.case import MATCHES, NOT_CHECKED, SourceCheck, fixed_branches
from faultbench.realbugs.readme import README, render

#: The cases added in the round issue 51 checked (git log --diff-filter=A, 2026-12-03 to
#: 2026-12-04: 52, less the one dropped since), each read again against its source.
ROUND_FOUR = 51
NOT_READ = "not read"  # how a check whose source was not read (again) begins


def test_every_case_says_how_it_was_held_to_its_source() -> None:
    cases = all_cases()
    checked = [c for c in cases if not c.source_check.read.startswith(NOT_READ)]
    assert len(checked) == ROUND_FOUR - 3  # three sources the stored corpus did not hold
    for case in cases:
        assert case.source_check.problem() == "", case.name
        assert not case.source_check.label.startswith("partly"), case.name


def test_a_checked_label_matches_and_an_unread_source_claims_nothing() -> None:
    for case in all_cases():
        check = case.source_check
        if check.read.startswith(NOT_READ):  # an unread source confirms nothing
            assert check.label.startswith(NOT_CHECKED), case.name
            assert check.mechanism.startswith(NOT_CHECKED), case.name
        assert check.label.startswith((MATCHES, NOT_CHECKED)), case.name


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"REENACTED_EFFECT": "PLACEHOLDER 0"}, "placeholder text in \\['reenacted_effect'\\]"),
        ({"FIDELITY_DATA": "stand-in: TODO"}, "placeholder text in \\['fidelity_data'\\]"),
        ({"REPORTED_EFFECT": "TBD: 3 runs"}, "placeholder text in \\['reported_effect'\\]"),
        ({"DIAGNOSIS": "FIXME"}, "placeholder text in \\['diagnosis'\\]"),
        (
            {"SOURCE_CHECK": SourceCheck("TODO", CHECK.label, CHECK.mechanism)},
            "placeholder text in \\['source_check.read'\\]",
        ),
        ({"SOURCE_CHECK": SourceCheck(" ", CHECK.label, CHECK.mechanism)}, "read is empty"),
        (
            {"SOURCE_CHECK": SourceCheck(CHECK.read, "fits", CHECK.mechanism)},
            "SOURCE_CHECK.label must start with",
        ),
        (
            {"SOURCE_CHECK": SourceCheck(CHECK.read, CHECK.label, "matches: ")},
            "SOURCE_CHECK.mechanism must start with",
        ),
        (
            {"SOURCE_CHECK": SourceCheck(CHECK.read, "partly: close", CHECK.mechanism)},
            "a label matches its source's diagnosis or is changed",
        ),
        ({"SOURCE_CHECK": "read the thread"}, "expected a SourceCheck"),
        ({"SOURCE_CHECK": None}, "lacks \\['SOURCE_CHECK'\\]"),
        ({"TWIN_DEPARTURES": None}, "lacks \\['TWIN_DEPARTURES'\\]"),
        ({"TWIN_DEPARTURES": "lr raised"}, "expected a tuple of texts"),
        ({"TWIN_DEPARTURES": ("",)}, "empty \\['twin_departures\\[0\\]'\\]"),
        ({"TWIN_DEPARTURES": ("XXX",)}, "placeholder text in \\['twin_departures\\[0\\]'\\]"),
        ({"BUG_BRANCHES": 0}, "BUG_BRANCHES 0"),
    ],
    ids=[
        "placeholder-effect",
        "todo-fidelity",
        "tbd-reported",
        "fixme-diagnosis",
        "todo-read",
        "empty-read",
        "label-verdict",
        "mechanism-no-reason",
        "label-partly",
        "check-text",
        "no-check",
        "no-departures",
        "departures-text",
        "empty-departure",
        "placeholder-departure",
        "no-bug-branch",
    ],
)
def test_an_unfinished_or_unchecked_case_is_refused(overrides: dict[str, object], why: str) -> None:
    with pytest.raises(FaultbenchError, match=why):
        Case.from_module(module(**overrides), labels())


# -- the twin's departures, counted against the script --------------------------------


def test_fixed_branches_counts_decisions_and_not_the_flag_handed_on() -> None:
    source = textwrap.dedent(
        """
        class Head:
            def __init__(self, fixed):
                self.sliding, self.fixed = True, fixed  # stored: handed on

            def forward(self, x):
                return x if self.fixed else -x  # 1: the attribute decides

        def split(rows, fixed):
            if not fixed:  # 2: the helper decides
                return rows
            return rows[1:]

        def widen(narrow):
            return 2 if narrow else 4

        def script(fixed, *, epochs=3):
            head = Head(fixed)  # handed on to a parameter of that name
            rows = split([1, 2], fixed)  # handed on
            width = widen(narrow=not fixed)  # 3: `not fixed` decides
            lr = 0.1 if fixed else 1e-5  # 4
            if fixed and epochs:  # 5
                pass
            return head, rows, width, lr
        """
    )
    assert len(fixed_branches(source)) == 5


def _case_from_source(tmp_path: Path, name: str, body: str, **constants: object) -> Case:
    """A case whose script lives in a real file, so its source can be read back."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # inspect finds a module's source through sys.modules
    try:
        spec.loader.exec_module(loaded)
        base: ModuleType = module(**constants)
        for key, value in vars(base).items():
            if key.isupper() and not hasattr(loaded, key):
                setattr(loaded, key, value)
        loaded.__name__ = f"faultbench.realbugs.cases.{name}"
        return Case.from_module(loaded, labels())
    finally:
        del sys.modules[name]


HUNKIM_LIKE = """
    def script(fixed, *, epochs=3):
        rows = [r / 10 for r in range(8)] if fixed else list(range(8))  # the fix: scale
        lr = 0.1 if fixed else 1e-5  # a second change the fix does not need
        return rows, lr
"""


def test_a_twin_that_departs_undeclared_is_refused(tmp_path: Path) -> None:
    case = _case_from_source(tmp_path, "undeclared_bug", HUNKIM_LIKE)
    assert case.twin_departures == ()
    problem = case.branch_problem()
    assert "branches on `fixed` 2 times" in problem and "1 for the bug" in problem


def test_a_declared_departure_or_a_second_bug_branch_balances_the_count(
    tmp_path: Path,
) -> None:
    declared = _case_from_source(
        tmp_path, "declared_bug", HUNKIM_LIKE, TWIN_DEPARTURES=("lr raised 10,000x",)
    )
    assert declared.branch_problem() == ""
    two_sites = _case_from_source(tmp_path, "two_site_bug", HUNKIM_LIKE, BUG_BRANCHES=2)
    assert two_sites.branch_problem() == ""
    over = _case_from_source(
        tmp_path, "overdeclared_bug", HUNKIM_LIKE, BUG_BRANCHES=2, TWIN_DEPARTURES=("lr",)
    )
    assert "declares 2 for the bug and 1 TWIN_DEPARTURES" in over.branch_problem()


def test_every_shipped_twin_departs_only_where_its_case_says() -> None:
    problems = {c.name: c.branch_problem() for c in all_cases()}
    assert {name: p for name, p in problems.items() if p} == {}
    departing = {c.name for c in all_cases() if c.twin_departures}
    assert "hunkim_stock_regression_without_minmax" in departing  # its rate, issue 51


# -- the README ------------------------------------------------------------------------


def test_the_readme_table_and_checks_are_what_the_cases_say() -> None:
    text = README.read_text()
    assert render(text, all_cases()) == text, (
        "realbugs/README.md is out of date: run `.venv/bin/python -m faultbench.realbugs.readme`"
    )
    for case in all_cases():
        assert f"| `{case.name}` | {case.label} |" in text
        assert case.source_check.summary in text


def test_render_refuses_a_readme_without_its_markers() -> None:
    with pytest.raises(ValueError, match="'cases' block"):
        render("# no markers\n", all_cases())
