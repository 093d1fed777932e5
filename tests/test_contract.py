"""The diagnoser contract: declared in one module, read nowhere else, checked line by line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from faultbench.cli.main import main
from faultbench.scoring import contract
from faultbench.scoring.diagnosis import diagnoser_names, get_diagnoser

REPO = Path(__file__).resolve().parents[1]
#: getattr/hasattr of an attribute the contract names, on anything; and of `name` on
#: something called a diagnoser (an instrument's name is its own business).
OPTIONAL = "|".join(a for a in contract.ATTRIBUTES if a != "name")
READ = re.compile(
    rf"""(getattr|hasattr)\(\s*[^,()]+(\([^()]*\))?\s*,\s*["']({OPTIONAL})["']"""
    rf"""|(getattr|hasattr)\(\s*\w*diag\w*[^,]*,\s*["']name["']"""
)


def test_no_module_but_the_contract_reads_a_diagnosers_attribute() -> None:
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for folder in ("faultbench", "diagnosers", "realbugs")
        for path in sorted((REPO / folder).rglob("*.py"))
        if path.name != "contract.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if READ.search(line)
    ]
    assert found == []
    assert READ.search('prepare = getattr(get_diagnoser(name), "prepare", None)')
    assert READ.search("reason = getattr(diagnoser, 'left_out_of_report', '')")


@pytest.mark.parametrize("name", [n for n in diagnoser_names() if n != "traincheck"])
def test_every_shipped_diagnoser_keeps_its_contract(name: str) -> None:
    diagnoser = get_diagnoser(name)
    assert contract.problems(diagnoser) == []
    declared = contract.contract_of(diagnoser)
    assert declared.name == name and set(declared.to_dict()) >= set(contract.OPTIONAL)


class Broken:
    name = "broken"
    tuned_on = ("digits",)  # a tuple, not a set
    reads_trace = "yes"
    subset_seeds = 0
    instrument = "no-such-instrument"

    def diagnose(self, run: object) -> None:
        return None


def test_each_broken_declaration_is_one_line() -> None:
    lines = contract.problems(Broken())
    assert [line.split("'")[3] for line in lines] == [
        "tuned_on",
        "instrument",
        "reads_trace",
        "subset_seeds",
    ]
    assert all(line.startswith("diagnoser 'broken': ") and "\n" not in line for line in lines)
    assert "no-such-instrument" in lines[1]


def test_faultbench_check_prints_one_line_per_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", f"{__name__}:Broken"]) == 1
    out = capsys.readouterr().out.splitlines()
    failed = [line for line in out if line.startswith("FAIL check_interface: ")]
    assert len(failed) == 4 and "reads_trace" in failed[1 + 1]


def test_the_defaults_are_what_a_plain_diagnoser_gets() -> None:
    class Plain:
        name = "plain"
        tuned_on: frozenset[str] = frozenset()

        def diagnose(self, run: object) -> None:
            return None

    declared = contract.contract_of(Plain())
    for attr, attribute in contract.OPTIONAL.items():
        value = getattr(declared, attr)
        assert value == (() if attr == "instrument" else attribute.default)
