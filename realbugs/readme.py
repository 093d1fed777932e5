"""realbugs/README.md's generated blocks: the table of cases and each case's source check.

The note's prose is written by hand; its table of cases and the list of source checks are
made from the cases themselves, between marker comments, so that what the README shows
is what the cases declare. ``python -m faultbench.realbugs.readme`` rewrites them in the
working tree's README; a test fails while they differ from what the cases say.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from faultbench.realbugs.case import Case

#: The README beside this module (the editable install links it into the source tree).
README = Path(__file__).resolve().parent / "README.md"
BLOCKS = ("cases", "checks")  # each between <!-- NAME: begin --> and <!-- NAME: end -->


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cases_table(cases: Sequence[Case]) -> str:
    """One row per case: what it is, how close to its source, how it was checked."""
    rows = [
        "| case | label | kind | model | faithful | observed | source check | twin departures "
        "| source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        departures = "; ".join(case.twin_departures) or "none"
        rows.append(
            f"| `{case.name}` | {case.label} | {case.kind} | {case.model} "
            f"| {'yes' if case.faithful else ''} | {'yes' if case.observed else 'no'} "
            f"| {case.source_check.summary} | {_cell(departures)} | {case.source} |"
        )
    return "\n".join(rows)


def checks_list(cases: Sequence[Case]) -> str:
    """Each case's source check in full: what was read, the label, the mechanism."""
    items = []
    for case in cases:
        check = case.source_check
        items.append(
            f"- `{case.name}`: *read*: {check.read} *Label*: {check.label} "
            f"*Mechanism*: {check.mechanism}"
        )
    return "\n".join(items)


def _filled(body: str) -> Callable[[re.Match[str]], str]:
    """A replacement that puts ``body`` between a block's two markers."""
    return lambda m: f"{m.group(1)}{body}\n{m.group(2)}"


def render(text: str, cases: Sequence[Case]) -> str:
    """``text`` with each generated block replaced by what ``cases`` say.

    Raises:
        ValueError: a block's markers are missing.
    """
    made = {"cases": cases_table(cases), "checks": checks_list(cases)}
    for block in BLOCKS:
        pattern = re.compile(
            rf"(<!-- {block}: begin -->\n)(?:.*?\n)?(<!-- {block}: end -->)", flags=re.DOTALL
        )
        if not pattern.search(text):
            raise ValueError(f"the README lacks the markers of its '{block}' block")
        text = pattern.sub(_filled(made[block]), text)
    return text


def main() -> int:
    """Rewrite the README's generated blocks from the shipped cases."""
    from faultbench.realbugs.suite import all_cases

    README.write_text(render(README.read_text(), all_cases()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
