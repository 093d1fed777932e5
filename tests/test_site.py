"""The leaderboard's site in a real headless browser: it renders, sorts on a click, links to a
diagnoser's page, and shows what a diagnoser returned as text, never as markup."""

from __future__ import annotations

import itertools
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from browser import Browser, file_url, find

from faultbench.reporting import assemble, resultfile
from faultbench.scoring.board import Board

HOSTILE = '<img src=x onerror="window.pwned = 1"><script>window.pwned = 2</script>'
#: diagnoser -> (answers right on the faulty runs, false alarms on the healthy ones), of 4 each
SKILL = {"sharp": (4, 0), "jumpy": (4, 3), "quiet": (1, 0)}


def _result(name: str, right: int, alarms: int) -> resultfile.ResultFile:
    rows = []
    for seed in range(4):
        for truth in ("healthy", "lr_too_high"):
            hit = seed < (right if truth != "healthy" else 4 - alarms)
            other = "healthy" if truth != "healthy" else "frozen_layer"
            rows.append(
                {
                    "key": f"k{name}{seed}{truth}", "suite": "grid", "task": "digits",
                    "task_kind": "multiclass", "grid": "classic", "every": 20, "prefix": 1.0,
                    "condition": truth if truth == "healthy" else "lr_too_high@100.0",
                    "truth": truth, "variant": "" if truth == "healthy" else truth,
                    "level": "" if truth == "healthy" else "canonical", "seed": seed,
                    "base": -1, "predicted": truth if hit else other, "also": "",
                    "status": "ok", "probe_steps": 0, "seconds": 0.01,
                }
            )  # fmt: skip
    return resultfile.ResultFile(
        diagnoser=name,
        source=name,
        code="c0de",
        contract={"tuned_on": [], "instrument": [], "prepare": False, "reads_trace": True,
                  "subset_seeds": None, "left_out_of_report": "", "probes": False, "name": name},
        board={},
        timeout=60.0,
        date="2026-01-02T03:04:05+00:00",
        software={"python": "3.11"},
        seconds=1.0,
        answers=resultfile.answers_frame(rows),
    )  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    files = tuple(_result(name, *skill) for name, skill in SKILL.items())
    assembled = assemble.Assembled(files, assemble.frame_of(files))
    out = tmp_path_factory.mktemp("results")
    board = Board(("digits",), ())
    assemble.write(assembled, board, out, evidence=lambda name, row: HOSTILE)
    return out / "site"


def test_the_headline_is_ranked_by_the_score_it_defines(site: Path) -> None:
    board = site.parent
    text = (board / "leaderboard.md").read_text()
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    # the headline is the first table; the per-kind pivot below it is another table
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[first:]))
    columns = [c.strip() for c in table[0].strip("|").split("|")]
    assert len(columns) <= 8 and columns[:3] == ["diagnoser", "tuned on", "score"]
    names = [line.strip("|").split("|")[0].strip() for line in table[2:]]
    # score = (identification + share of healthy runs called healthy) / 2, by hand:
    expected = {n: (r / 4 + (4 - a) / 4) / 2 for n, (r, a) in SKILL.items()}
    assert names == sorted(expected, key=lambda n: -expected[n])
    full = pd.read_csv(board / "leaderboard.csv", dtype=str).set_index("diagnoser")
    assert full.loc["jumpy", "score"].startswith(f"{expected['jumpy']:.3f}")


@pytest.mark.parametrize("riders", [(), ("cockpit-live",), ("cockpit-live", "traincheck")])
def test_the_headline_says_where_an_instruments_cost_is(tmp_path: Path, riders) -> None:
    # s/diagnosis prices reading a trained run; a diagnoser whose instrument rode in the
    # loop paid in training, which timings.md measures: the headline must say so, by name.
    files = tuple(
        replace(f, contract={**f.contract, "instrument": ["cockpit"]}) if f.diagnoser in riders
        else f
        for f in (_result(name, 2, 1) for name in ("cockpit-live", "traincheck", "quiet"))
    )  # fmt: skip
    assemble.write(assemble.Assembled(files, assemble.frame_of(files)), Board(("digits",), ()),
                   tmp_path, evidence=lambda name, row: "")  # fmt: skip
    text = (tmp_path / "leaderboard.md").read_text()
    assert "*s/diagnosis*: median seconds per diagnosis of a trained run" in text
    named = " and ".join(f"`{name}`" for name in riders)
    verb = "also trains" if len(riders) == 1 else "also train"
    assert (f"({named} {verb} each run again with an instrument" in text) == bool(riders)
    assert ("[timings.md](timings.md)" in text) == bool(riders)


class _Columns(HTMLParser):
    """The headline table's column tooltips and the definition list under it."""

    def __init__(self) -> None:
        super().__init__()
        self.titles: dict[str, str] = {}
        self.defined: list[tuple[str, str]] = []
        self._open: tuple[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open = (tag, dict(attrs).get("title"))

    def handle_data(self, data: str) -> None:
        if self._open and self._open[0] == "th" and self._open[1] is not None:
            self.titles.setdefault(data, self._open[1])
        elif self._open and self._open[0] == "dt":
            self.defined.append((data, ""))
        elif self._open and self._open[0] == "dd":
            self.defined[-1] = (self.defined[-1][0], data)
        self._open = None


def test_the_page_says_what_each_headline_column_holds(site: Path) -> None:
    page = _Columns()
    page.feed((site / "index.html").read_text())
    assert page.titles == assemble.HEADLINE
    assert page.defined == list(assemble.HEADLINE.items())


def test_what_a_diagnoser_returned_is_escaped(site: Path) -> None:
    page = (site / "d" / "jumpy.html").read_text()
    assert HOSTILE not in page and "&lt;script&gt;window.pwned = 2&lt;/script&gt;" in page


def test_the_site_renders_sorts_and_links_in_a_browser(site: Path) -> None:
    executable = find()
    if executable is None:
        pytest.skip("no Chromium installed (.ci/run installs Debian's chromium)")
    browser = Browser(executable, file_url(site / "index.html"))
    try:
        rows = "#headline tbody tr"
        names = f"Array.from(document.querySelectorAll('{rows}')).map(r => r.cells[0].innerText)"
        assert browser.evaluate(f"document.querySelectorAll('{rows}').length") == len(SKILL)
        browser.click("#headline th:nth-child(1)")  # by name, descending
        assert browser.evaluate(names) == sorted(SKILL, reverse=True)
        browser.click("#headline th:nth-child(1)")  # and ascending
        assert browser.evaluate(names) == sorted(SKILL)
        browser.click("#headline th:nth-child(5)")  # false alarms, most first
        assert browser.evaluate(names)[0] == "jumpy"
        browser.click(f"{rows}:first-child a")
        browser.wait_until("location.href.endsWith('/d/jumpy.html')")
        browser.wait_until("document.readyState === 'complete'")
        assert browser.evaluate("document.querySelector('h1').innerText") == "jumpy"
        assert browser.evaluate("window.pwned === undefined")
        assert (
            browser.evaluate("document.querySelectorAll('#wrong img, #wrong script').length") == 0
        )
        wrong = browser.evaluate("document.querySelectorAll('#wrong tbody tr').length")
        assert wrong == 3  # its three false alarms
    finally:
        browser.close()
