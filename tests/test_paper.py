"""The paper: a Jinja2 template built from results/, every number traced to a CSV cell, none
typed by hand."""

from __future__ import annotations

import html
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import pandas as pd
import pytest
from jinja2 import nodes

from faultbench.cli.main import main
from faultbench.core.errors import FaultbenchError
from faultbench.reporting.pages import KEYS
from faultbench.reporting.paper import build

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "paper" / "paper.md.j2"
RESULTS = REPO / "results"
TAGS = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)  # Jinja2's, expressions included


class _Numbers(HTMLParser):
    """Collects (data-key, text) of every ``<span class="num">`` in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []
        self._key: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "span" and values.get("class") == "num":
            self._key = values.get("data-key")
            self.found.append((self._key or "", ""))

    def handle_data(self, data: str) -> None:
        if self._key is not None:
            key, text = self.found[-1]
            self.found[-1] = (key, text + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._key = None


def _numbers(page: Path) -> list[tuple[str, str]]:
    parser = _Numbers()
    parser.feed(page.read_text())
    return parser.found


def _csv_value(results: Path, key: str) -> str:
    """The cell a scalar placeholder names, read independently of faultbench.reporting.paper."""
    kind, *parts = key.split(":")
    if kind == "count":
        frame = pd.read_csv(results / f"{parts[0]}.csv", dtype=str, keep_default_na=False)
        return str(frame[parts[1]].nunique())
    frame = pd.read_csv(results / f"{kind}.csv", dtype=str, keep_default_na=False)
    for column, value in zip(KEYS[kind], parts[:-1], strict=True):
        frame = frame[frame[column] == value]
    assert len(frame) == 1, key
    return str(frame.iloc[0][parts[-1]])


def _calls(source: str) -> list[tuple[str, list[str]]]:
    """Every call in the template, in order: (name, its constant arguments)."""
    tree = jinja2.Environment().parse(source)
    return [
        (call.node.name, [arg.value for arg in call.args])  # type: ignore[attr-defined]
        for call in tree.find_all(nodes.Call)
    ]


def _scalar_keys(source: str) -> list[str]:
    return [":".join([n, *a]) for n, a in _calls(source) if n not in ("table", "figure")]


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """The paper built from the committed source and the committed results/."""
    return build(SOURCE, RESULTS, tmp_path / "build" / "paper.html")


def test_every_number_in_the_paper_equals_its_csv_cell(built: Path) -> None:
    found = _numbers(built)
    assert [key for key, _ in found] == _scalar_keys(SOURCE.read_text())
    assert len(found) > 20
    assert [(k, v) for k, v in found if v != _csv_value(RESULTS, k)] == []


def test_paper_source_types_no_number() -> None:
    prose = TAGS.sub("", SOURCE.read_text())
    # A number starts a token; a digit inside a name (`rules-v1`) is part of the name.
    assert re.findall(r".{0,20}(?<!\w)\d.{0,20}", prose) == []


def test_paper_includes_every_table_and_figure(built: Path) -> None:
    page = built.read_text()
    calls = _calls(SOURCE.read_text())
    tables = [args for name, args in calls if name == "table"]
    assert page.count("<table>") == len(tables) >= 5
    figures = [args[0] for name, args in calls if name == "figure"]
    assert len(figures) >= 3
    for figure in figures:
        copied = built.parent / "figures" / figure.replace("/", "-")
        assert copied.read_bytes() == (RESULTS / figure).read_bytes()
        assert f'src="figures/{figure.replace("/", "-")}"' in page
    assert "{{" not in page


def test_a_changed_csv_changes_the_paper(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    faults = pd.read_csv(results / "faults.csv", dtype=str, keep_default_na=False)
    where = (faults.task == "digits") & (faults.condition == "huge_inputs")
    old = faults.loc[where, "first_loss_mean"].item()
    faults.loc[where, "first_loss_mean"] = "12345.678"
    faults.to_csv(results / "faults.csv", index=False, lineterminator="\n")
    page = build(SOURCE, results, tmp_path / "paper.html")
    numbers = dict(_numbers(page))
    assert numbers["faults:digits:huge_inputs:first_loss_mean"] == "12345.678" != old
    assert "12345.678 ± " in html.unescape(page.read_text())  # the included table too


@pytest.mark.parametrize(
    ("placeholder", "message"),
    [
        (
            'faults("digits", "huge_input", "first_loss_mean")',
            "Unknown row of faults.csv 'digits:huge_input'. Did you mean 'digits:huge_inputs'?",
        ),
        (
            'faults("digits", "huge_inputs", "first_los_mean")',
            "Unknown column of faults.csv 'first_los_mean'. Did you mean 'first_loss_mean'?",
        ),
        ('scors("random", "digits", "accuracy")', "Unknown name 'scors'. Did you mean 'scores'?"),
        (
            'scores("random", "accuracy")',
            "scores('random', 'accuracy') is malformed; expected scores(DIAGNOSER, TASK, COLUMN)",
        ),
        ('table("score")', "Unknown table 'score'. Did you mean 'scores'?"),
        ('figure("curves/digitz.png")', "curves/digitz.png' not found; run `faultbench report`"),
        ("defaults.healthy_seed", "has no attribute 'healthy_seed'"),
        ('faults("digits", "healthy"', "unexpected '}', expected ')'"),  # a syntax error
    ],
)
def test_an_unknown_name_fails_the_build_naming_the_line(
    placeholder: str, message: str, tmp_path: Path
) -> None:
    source = tmp_path / "paper.md.j2"
    source.write_text(f"# Title\n\nThe value is {{{{ {placeholder} }}}}.\n")
    with pytest.raises(
        FaultbenchError, match=re.escape(f"{source}:3: ") + ".*" + re.escape(message)
    ):
        build(source, RESULTS, tmp_path / "out.html")
    assert not (tmp_path / "out.html").exists()


def test_cli_builds_the_paper(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "paper.html"
    args = ["paper", "--source", str(SOURCE), "--results", str(RESULTS), "--out", str(out)]
    assert main(args) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_cli_without_results_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    args = [
        "paper",
        "--source",
        str(SOURCE),
        "--results",
        str(missing),
        "--out",
        str(tmp_path / "p.html"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{missing}/setup.csv not found; run `faultbench report` first" in err
    assert len(err.strip().splitlines()) == 1
