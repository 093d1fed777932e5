"""The leaderboard as a static web page: ``results/site/index.html`` and a page per diagnoser.

No server and no network: every page is one HTML file with its CSS and its few lines
of JavaScript inline (the tables sort on a click), rendered by Jinja2 templates
(``templates/*.j2``; an undefined name is an error, and everything a diagnoser
returned is escaped). A diagnoser's page holds its confusion matrix, its
identification per task, per kind of task and per variant, its false alarms per
design axis value, and the runs it got wrong with its answer and, where the store
that made the answers is at hand, its evidence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from faultbench.reporting import leaderboard
from faultbench.scoring import scores

WRONG_SHOWN = 200  # wrong runs listed per diagnoser (the rest are in its result file)
EVIDENCE_CHARS = 600  # evidence shown per run
KIND_COLUMNS = ["kind", "tasks", "identification", "false alarms"]


def environment() -> Any:
    """The Jinja2 environment: the package's templates, autoescaped, strict."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("faultbench.reporting", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def page_name(diagnoser: str) -> str:
    """A diagnoser's page under ``site/``: its name made path-safe."""
    return "d/" + re.sub(r"[^A-Za-z0-9_.-]", "_", diagnoser) + ".html"


def write(
    assembled: Any,
    top: pd.DataFrame,
    full: pd.DataFrame,
    tables: Mapping[str, pd.DataFrame],
    out: Path,
    *,
    evidence: Any = None,
    meanings: Mapping[str, str] | None = None,
) -> list[Path]:
    """Write ``index.html`` and one page per diagnoser under ``out``.

    Args:
        assembled: The checked result files and their answers
            (:class:`faultbench.reporting.assemble.Assembled`).
        top: The ranked headline.
        full: Every column.
        tables: The per task / kind / variant / axis tables, by file name.
        out: The site's folder.
        evidence: ``(diagnoser, row) -> str``: a wrong answer's evidence ('' unknown).
        meanings: What each headline column holds, by column (shown under the table and
            as each column's tooltip).
    """
    env = environment()
    out.mkdir(parents=True, exist_ok=True)
    shown = top.copy()
    for column in ("score", "identification", "false alarms", "held-out tasks", "real bugs"):
        shown[column] = [("n/a" if pd.isna(v) else f"{v:.3f}") for v in top[column]]
    shown["s/diagnosis"] = [("n/a" if pd.isna(v) else f"{v:.2g}") for v in top["s/diagnosis"]]
    rows = [{**row, "page": page_name(row["diagnoser"])} for row in shown.to_dict("records")]
    index = env.get_template("index.html.j2").render(
        title="leaderboard",
        count=len(rows),
        score=leaderboard.SCORE.replace("*", ""),
        columns=list(shown.columns),
        meanings={column: (meanings or {}).get(column, "") for column in shown.columns},
        rows=rows,
        notes=[note.replace("`", "") for note in assembled.notes],
        full_columns=list(full.columns),
        full_rows=full.astype(str).values.tolist(),
    )
    written = [_write(out / "index.html", index)]
    frame = leaderboard.whole(assembled.frame)
    for f in assembled.files:
        mine = frame[frame["diagnoser"] == f.diagnoser]
        page = env.get_template("diagnoser.html.j2").render(
            title=f.diagnoser,
            name=f.diagnoser,
            tuned_on=", ".join(f.contract["tuned_on"]) or "nothing",
            date=f.date[:10],
            code=f.code,
            answers=len(f.answers),
            software=", ".join(f"{k} {v}" for k, v in f.software.items()),
            contract=sorted((k, json.dumps(v)) for k, v in f.contract.items()),
            sections=_sections(f.diagnoser, mine, tables),
            **_wrong(f.diagnoser, mine, evidence),
        )
        written.append(_write(out / page_name(f.diagnoser), page))
    return written


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _sections(
    name: str, mine: pd.DataFrame, tables: Mapping[str, pd.DataFrame]
) -> list[dict[str, Any]]:
    """The page's tables: confusion, per task, per kind, per variant, per design axis."""
    full = leaderboard.headline_part(mine)
    confusion = pd.crosstab(full["truth"], full["predicted"]) if len(full) else pd.DataFrame()
    per_task = [
        [task, leaderboard.cell(scores.identification(part)["accuracy"]),
         leaderboard.cell(scores.false_alarms(part))]
        for task, part in full.groupby("task", sort=False)
    ]  # fmt: skip

    def own(table: str, columns: list[str]) -> list[list[str]]:
        frame = tables[table]
        return frame[frame["diagnoser"] == name][columns].astype(str).values.tolist()

    return [
        {
            "title": "Confusion matrix",
            "note": "Full grid at the default sampling (the classic grid on a board without "
            "one): rows the truth, columns the answer.",
            "columns": ["truth \\ answer", *map(str, confusion.columns)],
            "rows": [[str(t), *map(str, r)] for t, r in zip(confusion.index, confusion.values)],
        },
        {
            "title": "Per task",
            "note": "Full grid: identification and false alarms with 95% Wilson intervals.",
            "columns": ["task", "identification", "false alarms"],
            "rows": per_task,
        },
        {
            "title": "Per kind of task",
            "note": "",
            "columns": KIND_COLUMNS,
            "rows": own("leaderboard_kinds.csv", KIND_COLUMNS),
        },
        {
            "title": "Per variant",
            "note": "Known faults: named; held-out faults: not called healthy.",
            "columns": ["task", "variant", "kind", "share"],
            "rows": own("leaderboard_variants.csv", ["task", "variant", "kind", "share"]),
        },
        {
            "title": "False alarms by design axis",
            "note": "Healthy drawn runs, per value of each axis of their design.",
            "columns": ["axis", "value", "runs", "false alarms", "share", "low", "high"],
            "rows": own(
                "false_alarms_by_axis.csv",
                ["axis", "value", "runs", "false_alarms", "share", "low", "high"],
            ),
        },
    ]


def _wrong(name: str, mine: pd.DataFrame, evidence: Any) -> dict[str, Any]:
    """The runs ``name`` got wrong (the first :data:`WRONG_SHOWN`), with their evidence."""
    # A held-out fault's right answer is other_fault (its own name is told to no diagnoser).
    expected = mine["truth"].where(mine["kind"] != scores.HELDOUT, scores.OTHER_FAULT)
    wrong = mine[(mine["status"] != "ok") | (mine["predicted"] != expected)]
    runs = []
    for row in wrong.head(WRONG_SHOWN).itertuples(index=False):
        said = row.predicted if row.status == "ok" else f"{row.status} ({row.predicted})"
        found = evidence(name, row) if evidence is not None else ""
        runs.append(
            {
                "task": row.task,
                "grid": f"{row.grid}, every {row.every}",
                "condition": row.condition,
                "seed": row.seed,
                "answer": said,
                "evidence": (found or "(not in this store)")[:EVIDENCE_CHARS],
            }
        )
    more = len(wrong) - len(runs)
    note = f"{len(wrong)} wrong answers" + (
        f"; the first {len(runs)} shown, every one is in its result file" if more else ""
    )
    return {"wrong": runs, "wrong_note": note}
