"""The README and docs/ state no measured number by hand: every one is in a block generated
from results/ (reporting/pages.py), and what is typed is declared not to be a measurement."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from faultbench.core.errors import FaultbenchError
from faultbench.reporting import pages
from faultbench.reporting.assemble import MARKERS

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)  # a code block: commands, code
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)  # a template's own tags
NUMERAL = re.compile(r"(?<![\w.\-])\d")  # a number starts a token: `rules-v1` is a name

CONFIG = "the code's settings and defaults, not a measurement"
PUBLISHED = "a ported tool's published defaults and thresholds, not a measurement"
PINNED = "thresholds as the code holds them (a test holds this table to the code)"
VERSIONS = "versions of the software, not a measurement"
TUNING = "a design record: what was seen when a threshold or a choice was set, frozen with it"
GOAL = "a goal or a budget, not a measurement"
CITED = "a cited study's published figures and dates, not a measurement of faultbench's"

#: Per page, the blocks (a paragraph, a list, a table: named by how they start) whose typed
#: numbers are not measurements, and why. Every other typed number fails the test: a
#: measured one belongs in a generated block (docs/templates/NAME.md.j2).
NOT_MEASURED: dict[str, dict[str, str]] = {
    "README.md": {"On a fresh machine with Python 3.11": VERSIONS},
    "docs/faults.md": {
        "| name | what is broken |": CONFIG,
        "| fault | variant | the bug | lives in |": CONFIG,
        "A variant that cannot apply to a task says why": CONFIG,
        "| held-out fault | the bug | lives in |": CONFIG,
        # What was measured when the bound and the loaders were set (issue 51), frozen with
        # them: the table is the shipped runs dataset's (bench/wait_shares.py reads it), the
        # threshold the calibration's; the report's own wait shares are in results/waits.csv.
        '<a id="data-bound"></a>**Data-bound.**': TUNING,
        "The wait shares of the board's healthy drawn runs": TUNING,
        "| task | healthy drawn runs (seeds) | median | p95 | largest |": TUNING,
        "The doctor's and `rules`' wait check fires above its principle's bound": TUNING,
    },
    "docs/huggingface.md": {
        "**A probe.**": CONFIG,
        "- **the loss the Trainer backpropagated**": VERSIONS,
    },
    "docs/instruments.md": {
        "**Cockpit, live**": TUNING,
        "**TrainCheck**": TUNING + "; the count of the invariants it ships; " + VERSIONS,
        "**Overhead.**": CONFIG,
    },
    "docs/method.md": {
        "**The grids.**": CONFIG,
        "**Families of healthy recipes.**": CONFIG + " (and the bound that follows from them)",
        "**The traces users record.**": CONFIG,
        "**Levels.**": CONFIG,
        "`faultbench run` prints the same summary, within 100 columns": CONFIG,
        "A diagnoser that does not ship with faultbench": CONFIG,
        "- `faultbench sweep --fault lr_too_high": CONFIG,
        "**A case** is one file of `realbugs/cases/`": CONFIG,
        "Why: a random split puts runs of the same program": CITED,
    },
    "docs/monitor.md": {
        "- **every layer**": CONFIG,
        "**Early warnings while it trains.**": CONFIG + " (a callback's default; a figure)",
        "**A false-alarm budget.**": GOAL,
        "It only reads:": CONFIG + "; " + GOAL,
    },
    "docs/performance.md": {
        "| figure | goal |": GOAL,
        "Each overhead figure is the median of interleaved rounds": CONFIG,
        "`make bench`": CONFIG,
    },
    "docs/ports.md": {
        "| diagnoser | paper | repository |": "the papers' venues and years",
        "* **An epoch** is one of the loop's ten periodic evaluations": CONFIG,
        "Checks at epochs 0, 3, 6, 9": PUBLISHED,
        "| problem | label | raised by (default_param) |": PINNED,
        "Checks every epoch, in the published order": PUBLISHED,
        "| symptom | label | fires when |": PINNED,
        "| fix | label | recommended when |": PINNED,
        "Four structure checks before training": PUBLISHED,
        "| warning | label | fires when |": PINNED,
        "Pre-checks, the overfit phase": PUBLISHED,
        "| field | shape | read by |": CONFIG,
        "`mean_abs` is the mean |output| of every module": CONFIG,
        "`bench/ports_firing.py --store DIR`": CONFIG,
        "Each port keeps its tool's rules and **published thresholds**": CITED,
        "`default-port` ports Jahan, Shah, Mahbub and Rahman": CITED,
        "**Hierarchy, as the paper has it.**": PUBLISHED,
        "**Classifiers.** The package's random forest": PUBLISHED,
        "**Features from traces, not Keras callbacks.**": PUBLISHED,
        "| feature | DEFault's callback | read off the trace |": PUBLISHED,
        "**Static features left out.**": PUBLISHED,
        "| faultbench label | DEFault category |": CONFIG,
        "**Training runs.** On each tuned-on task": CONFIG,
    },
    "docs/runs.md": {
        "Partitioned by task (hive style)": CONFIG,
        "| tier | where | traces | instruments' records | who makes it |": CONFIG,
        "The headline is read at the Monitor's default sampling": CONFIG,
        "| column | type | meaning |": CONFIG,
        "- **per step** (one value per optimizer update": CONFIG,
    },
    "docs/reproducibility.md": {
        "`results/` holds the tables and figures": CONFIG,
        "What a report costs:": GOAL,
        "Every process that trains a run runs the same CPU kernels": "the processors' dates",
    },
    "docs/tasks.md": {
        "Two sequence tasks train a small decoder-only transformer": CONFIG,
        "The instruction sits in the prompt": CONFIG,
        "The known faults apply where they make sense": TUNING,
        "The Monitor records what a diagnoser needs to see them": CONFIG,
        "`rules` was tuned on `numbers` and frozen.": CONFIG,
        "A task declares its healthy recipe's optimizer": CONFIG,
        "A class needs at least `MIN_EXAMPLES_PER_CLASS` (10) examples": CONFIG,
    },
    "docs/tools.md": {
        "Three tools people can `pip install`": VERSIONS,
        "The `tools` extra pins the four packages": VERSIONS,
        "One oddity:": VERSIONS,
        "Without the extra, each adapter is listed as unavailable": CONFIG,
        "No tool publishes thresholds that name a training fault": CONFIG,
        "`LRFinder(model, Adam(lr=1e-7)": PUBLISHED,
        "| symptom | label | what the tool measured | threshold from |": PINNED,
        "How each was chosen": TUNING,
        "`WeightWatcher(model=final).analyze()`": PUBLISHED,
        "The replay with `backpack.extend(model)`": PUBLISHED,
        "A replay costs about what training the run cost": CONFIG,
        "A replay carries the model, the data and the rate, not the loop.": CONFIG,
        "The `cockpit` instrument tracks the same `economy` quantities": CONFIG,
        "How the growth threshold was chosen": TUNING,
        "During tuning (a record of how the thresholds were set, not a result)": TUNING,
    },
}


def _sources() -> list[Path]:
    """Every page a reader gets and every template of its generated blocks."""
    return [
        *pages.pages_of(REPO),
        *sorted((REPO / pages.TEMPLATES).glob(f"*{pages.SUFFIX}")),
    ]


def _typed_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(the block, its typed numbers) for each block of ``text`` that types a number:
    generated blocks, code, link targets, comments and a template's tags set aside."""
    start, end = MARKERS
    text = pages.BLOCK.sub("", text)  # checked as their templates
    text = re.sub(re.escape(start) + ".*?" + re.escape(end), "", text, flags=re.S)
    found = []
    for block in re.split(r"\n[ \t]*\n", FENCE.sub("", text)):
        plain = re.sub(r"`[^`\n]*`", "", block)
        plain = re.sub(r"\]\([^)]*\)", "]", plain)
        plain = JINJA.sub("", re.sub(r"<!--.*?-->", "", plain, flags=re.S))
        numbers = [plain[m.start() : m.start() + 12] for m in NUMERAL.finditer(plain)]
        if numbers:
            found.append((block.strip(), numbers))
    return found


def test_every_generated_block_is_its_template_rendered_from_the_committed_results() -> None:
    rendered = pages.rendered(REPO, RESULTS)
    assert len(rendered) >= 5
    stale = [str(p.relative_to(REPO)) for p, text in rendered.items() if p.read_text() != text]
    assert stale == [], "regenerate them: faultbench leaderboard (or make report)"


@pytest.mark.parametrize("source", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_types_a_measured_number(source: Path) -> None:
    allowed = NOT_MEASURED.get(str(source.relative_to(REPO)), {})
    typed = [
        f"{numbers} in '{block[:70]}...'"
        for block, numbers in _typed_blocks(source.read_text())
        if not block.startswith(tuple(allowed))
    ]
    assert typed == [], (
        "a number typed by hand: take it from results/ in a generated block "
        "(docs/templates/NAME.md.j2), or declare its block in NOT_MEASURED with why"
    )


def test_every_declared_block_is_in_its_page() -> None:
    """A declaration outlives no block: each names a block of its page that types a number."""
    unused = []
    for page, allowed in NOT_MEASURED.items():
        blocks = [block for block, _ in _typed_blocks((REPO / page).read_text())]
        unused += [(page, a) for a in allowed if not any(b.startswith(a) for b in blocks)]
    assert unused == []


def test_the_rule_finds_a_typed_number_and_sets_code_and_tags_aside() -> None:
    text = "A prose line with 42 runs.\n\n```sh\nmake 99\n```\n\nA `code 7` and {{ x(3) }}.\n"
    assert [numbers for _, numbers in _typed_blocks(text)] == [["42 runs."]]


def _project(tmp_path: Path, template: str, page: str) -> Path:
    project = tmp_path / "project"
    (project / pages.TEMPLATES).mkdir(parents=True)
    (project / pages.TEMPLATES / f"board{pages.SUFFIX}").write_text(template)
    (project / "docs" / "page.md").write_text(page)
    return project


def _page(name: str = "board") -> str:
    return f"# A page\n\nBy hand.\n\n{pages.start_marker(name)}\nold\n<!-- results:{name}:end -->\n"


def test_a_changed_result_changes_the_page(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results, ignore=shutil.ignore_patterns("*.png", "confusion"))
    frame = pd.read_csv(results / "scores.csv", dtype=str, keep_default_na=False)
    frame.loc[(frame.diagnoser == "rules") & (frame.task == "digits"), "correct"] = "12345"
    frame.to_csv(results / "scores.csv", index=False, lineterminator="\n")
    template = '`rules` names {{ scores("rules", "digits", "correct") }}.\n'
    project = _project(tmp_path, template, _page())
    assert pages.write_docs(project, results) == [project / "docs" / "page.md"]
    text = (project / "docs" / "page.md").read_text()
    assert "By hand.\n" in text and "`rules` names 12345.\n" in text and "old" not in text
    assert pages.write_docs(project, results) == []  # rendered again: nothing changes


def test_a_count_is_the_csv_s_own(tmp_path: Path) -> None:
    cases = pd.read_csv(RESULTS / "realbugs_cases.csv", dtype=str, keep_default_na=False)
    template = (
        '{{ count("realbugs_cases", "case") }} '
        '{{ count("realbugs_cases", "case", label="other_fault") }}\n'
    )
    project = _project(tmp_path, template, _page())
    text = pages.rendered(project, RESULTS)[project / "docs" / "page.md"]
    other = cases.loc[cases["label"] == "other_fault", "case"]
    assert f"\n{cases['case'].nunique()} {other.nunique()}\n" in text and len(other) > 0


@pytest.mark.parametrize(
    ("template", "page", "message"),
    [
        ('{{ scores("rules", "digit", "correct") }}\n', _page(), "board.md.j2:1: Unknown row"),
        ("x\n{{ scors() }}\n", _page(), "board.md.j2:2: Unknown name 'scors'"),
        ("x\n", _page("other"), "block 'other' has no template"),
        ("x\n", "# No block\n", "board.md.j2 is in no page"),
    ],
)
def test_a_broken_block_fails_naming_it_and_writes_nothing(
    tmp_path: Path, template: str, page: str, message: str
) -> None:
    project = _project(tmp_path, template, page)
    with pytest.raises(FaultbenchError, match=re.escape(message)):
        pages.write_docs(project, RESULTS)
    assert (project / "docs" / "page.md").read_text() == page
