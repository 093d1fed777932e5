"""The leaderboard assembled from the result files alone: nothing is diagnosed again.

``faultbench leaderboard`` (and ``make report`` after it writes the shipped
diagnosers' files) reads ``results/diagnosers/*.json`` (:mod:`faultbench.reporting.resultfile`),
refuses a file made on another board or on other runs (each answer's run key is
rebuilt from the installed code, :func:`faultbench.reporting.submission.stale`) in
one line that says how to refresh it, and writes:

- ``leaderboard.md``: the ranked headline (:data:`HEADLINE`, at most 8 columns, the
  ranking score defined in one sentence) and the figure of identification against
  false alarms (``leaderboard.png``, the best trade-offs joined);
- ``leaderboard_full.md`` and ``leaderboard.csv``: every column, each share with its
  95% interval, the date and code each file was scored with; per task
  (``leaderboard_tasks.csv``), per kind of task (``leaderboard_kinds.csv``), per
  variant (``leaderboard_variants.csv``), false alarms per design axis value
  (``false_alarms_by_axis.csv``), recall by severity (``leaderboard_levels.png``), and how
  early each knows: identification, false alarms and the undecided share on runs cut at
  10%, 25%, 50% and 100% of their steps (``leaderboard_prefixes.csv`` and ``.png``,
  :mod:`faultbench.reporting.prefixes`);
- ``site/``: the same as a static web page (:mod:`faultbench.reporting.site`).

A diagnoser that declares ``left_out_of_report`` (too slow for ``make report``) keeps
its row when its runs are of older code: the row says the date and code it was
scored on. Every other stale file is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from faultbench.core.errors import FaultbenchError
from faultbench.faults.family import draw_design
from faultbench.faults.fault import HEALTHY, OTHER_FAULT, labels
from faultbench.reporting import leaderboard, prefixes
from faultbench.reporting.leaderboard import SCORE, headline_part, whole
from faultbench.reporting.resultfile import FOLDER, ResultFile, read_all
from faultbench.reporting.submission import _contract, stale
from faultbench.scoring import scores, stats
from faultbench.scoring.board import REALBUGS, Board
from faultbench.tasks.task import get_task
from faultbench.training.monitor import DEFAULT_EVERY

#: The headline's columns, in order (at most 8), and what each holds.
HEADLINE = {
    "diagnoser": "the diagnoser",
    "tuned on": "the tasks whose results shaped it",
    "score": "the ranking score: the mean of identification and 1 - false alarms",
    "identification": "full grid: runs with a known fault named correctly",
    "false alarms": "full grid: healthy drawn runs called faulty",
    "held-out tasks": "identification on the tasks it was not tuned on",
    "real bugs": "identification on the real-bug suite's known-label cases",
    "s/diagnosis": "median seconds per diagnosis of a trained run, as measured when it was "
    "scored (a diagnoser whose instrument rides in the loop pays in training too: timings.md)",
}


@dataclass(frozen=True)
class Assembled:
    """The files of a leaderboard, checked, and the one table of their answers."""

    files: tuple[ResultFile, ...]  # every result file, by name
    frame: pd.DataFrame = field(repr=False)  # every answer (scores.COLUMNS and more)
    notes: tuple[str, ...] = ()  # lines under the headline (subsets, kept stale rows)


def load(results: Path, board: Board) -> Assembled:
    """Read and check every result file under ``results``.

    Raises:
        FaultbenchError: no result file; a broken one; one scored on another board or on
            runs the installed code does not give (one line: which, and the fix).
    """
    files = read_all(results / FOLDER)
    if not files:
        raise FaultbenchError(
            f"no result file under '{results / FOLDER}'; expected one per diagnoser: "
            "faultbench score --diagnoser NAME (or make report)"
        )
    notes = []
    for f in files:
        contract = _contract(f)
        fix = f"refresh it: faultbench score --diagnoser {f.source}"
        lite = _lite_of(f.board, board.to_dict(contract))
        if f.board != board.to_dict(contract) and not lite:
            raise FaultbenchError(
                f"{f.path} was scored on another board ({_board_diff(f.board, board, contract)});"
                f" {fix}"
            )
        old = stale(f)
        if old and not contract.left_out_of_report:
            raise FaultbenchError(
                f"{f.path} was made on other runs: {len(old)} of its {len(f.answers)} run keys "
                f"are not the installed code's (e.g. {old[0]}); {fix}"
            )
        if old:
            notes.append(
                f"`{f.diagnoser}` stands as scored on {f.date[:10]} with code {f.code} "
                f"({contract.left_out_of_report}): {len(old)} of its runs are of older code"
            )
        elif text := board.subset_text(contract):
            runs = f.answers.loc[f.answers["prefix"] == 1.0, "key"].nunique()
            notes.append(f"`{f.diagnoser}` is scored on {text}: {runs} runs")
        if lite:
            notes.append(
                f"`{f.diagnoser}` has no every-step columns: it was scored on the lite runs "
                "dataset, which keeps every 20th step (the full tier, `make runs`, has them all)"
            )
    return Assembled(tuple(files), frame_of(files), tuple(notes))


def _lite_of(found: dict[str, object], expected: dict[str, object]) -> bool:
    """Whether a file scored on ``found`` is the board ``expected`` without its every-step
    evaluations (scored where only the lite runs dataset holds the runs): it stands, and
    its every-step cells stay empty."""
    return bool(expected.get("every_step")) and found == {**expected, "every_step": False}


def _board_diff(found: dict[str, object], board: Board, contract: object) -> str:
    expected = board.to_dict(contract)  # type: ignore[arg-type]
    diffs = [
        f"{k} {found.get(k)!r}, expected {v!r}" for k, v in expected.items() if found.get(k) != v
    ]
    return "; ".join(diffs[:2])


def kind_of_truth(truth: str) -> str:
    """healthy, known (one of the known faults) or heldout (a bug outside them)."""
    if truth == HEALTHY:
        return scores.HEALTHY
    return scores.KNOWN if truth in labels() and truth != OTHER_FAULT else scores.HELDOUT


def frame_of(files: Sequence[ResultFile]) -> pd.DataFrame:
    """Every answer of every file in :data:`faultbench.scoring.scores.COLUMNS`, plus suite,
    task_kind, prefix, condition, base, key and the file's date and code."""
    parts = []
    for f in files:
        a = f.answers
        tuned = set(f.contract["tuned_on"])
        parts.append(
            pd.DataFrame(
                {
                    "diagnoser": f.diagnoser,
                    "task": a["task"],
                    "tuned": a["task"].isin(tuned),
                    "seed": a["seed"],
                    "truth": a["truth"],
                    "kind": a["truth"].map(kind_of_truth),
                    "variant": a["variant"],
                    "level": a["level"],
                    "grid": a["grid"],
                    "predicted": a["predicted"],
                    "status": a["status"],
                    "probe_steps": a["probe_steps"],
                    "drawn": a["base"] >= 0,
                    "every": a["every"],
                    "diagnose_seconds": a["seconds"],
                    "suite": a["suite"],
                    "task_kind": a["task_kind"],
                    "prefix": a["prefix"],
                    "condition": a["condition"],
                    "base": a["base"],
                    "key": a["key"],
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def designs(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (healthy drawn run, design axis) of the full grid at the default
    sampling: the run's axis value and whether the answer was an alarm (the drawn design
    rebuilt from its task, seed and base: no store needed)."""
    healthy = frame[
        (frame["grid"] == "full")
        & (frame["every"] == DEFAULT_EVERY)
        & (frame["kind"] == scores.HEALTHY)
        & frame["drawn"]
    ]
    axes: dict[tuple[str, int, int], dict[str, object]] = {}
    rows = []
    for r in healthy.itertuples(index=False):
        where = (r.task, int(r.seed), int(r.base))
        if where not in axes:
            axes[where] = draw_design(get_task(r.task), *where[1:]).axes()
        alarm = r.status == "ok" and scores.raises_alarm(r.predicted)
        rows += [(r.diagnoser, r.task, r.seed, a, str(v), alarm) for a, v in axes[where].items()]
    return pd.DataFrame(rows, columns=["diagnoser", "task", "seed", "axis", "value", "alarm"])


def headline_score(part: pd.DataFrame) -> tuple[float, float, float]:
    """:data:`SCORE` of one diagnoser's full-grid answers, with its bootstrap interval
    (the known-fault runs and the healthy runs resampled apart)."""
    known = part[part["kind"] == scores.KNOWN]
    healthy = part[part["kind"] == scores.HEALTHY]
    right = ((known["status"] == "ok") & (known["predicted"] == known["truth"])).to_numpy(float)
    quiet = ~((healthy["status"] == "ok") & healthy["predicted"].map(scores.raises_alarm)).to_numpy(
        bool
    )
    if not len(right) or not len(quiet):
        return float("nan"), float("nan"), float("nan")
    low, high = stats.bootstrap([right, quiet.astype(float)], _mean_of_means, vectorized=True)
    return (float(right.mean()) + float(quiet.mean())) / 2, low, high


def _mean_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return (np.mean(a, axis=axis) + np.mean(b, axis=axis)) / 2  # type: ignore[no-any-return]


def headline(assembled: Assembled) -> pd.DataFrame:
    """The ranked headline: one row per diagnoser in :data:`HEADLINE`, best score first."""
    frame = whole(assembled.frame)
    rows = []
    for f in assembled.files:
        mine = frame[frame["diagnoser"] == f.diagnoser]
        full = headline_part(mine)
        s = scores.summary(full)
        value, _, _ = headline_score(full)
        real = scores.identification(mine[mine["suite"] == REALBUGS])["accuracy"]
        rows.append(
            {
                "diagnoser": f.diagnoser,
                "tuned on": ", ".join(f.contract["tuned_on"]) or "nothing",
                "score": value,
                "identification": s["identification"]["accuracy"].value,
                "false alarms": s["false_alarms"].value,
                "held-out tasks": s["splits"]["held_out_task"]["identification"].value,
                "real bugs": real.value,
                "s/diagnosis": float(mine["diagnose_seconds"].median()) if len(mine) else np.nan,
            }
        )
    table = pd.DataFrame(rows, columns=list(HEADLINE))
    return table.sort_values(["score", "diagnoser"], ascending=[False, True], na_position="last")


def full_table(assembled: Assembled, board: Board) -> pd.DataFrame:
    """Every column of the full table: :func:`leaderboard.rows`, the score with its
    interval, the real-bug shares, and the date and code each file was scored with."""
    frame = whole(assembled.frame)
    grid = frame[frame["suite"] != REALBUGS]
    by_name = {f.diagnoser: f for f in assembled.files}
    contracts = {name: _contract(f) for name, f in by_name.items()}
    table = pd.DataFrame(
        leaderboard.rows(
            grid,
            {n: f.contract["tuned_on"] for n, f in by_name.items()},
            subsets={n: t for n, c in contracts.items() if (t := board.subset_text(c))},
            instruments={n: f.contract["instrument"] for n, f in by_name.items()},
        )
    )
    extra = []
    for name, f in by_name.items():
        mine = frame[frame["diagnoser"] == name]
        value, low, high = headline_score(headline_part(mine))
        real = mine[mine["suite"] == REALBUGS]
        detection = scores.detection(real)
        extra.append(
            {
                "diagnoser": name,
                "score": "n/a" if np.isnan(value) else f"{value:.3f} [{low:.2f}, {high:.2f}]",
                "real-bug identification": leaderboard.cell(
                    scores.identification(real)["accuracy"]
                ),
                "real-bug out-of-list not healthy": leaderboard.cell(detection["not_healthy"]),
                "real-bug out-of-list other_fault": leaderboard.cell(detection["other_fault"]),
                "real-bug false alarms": leaderboard.cell(scores.false_alarms(real)),
                "seconds/diagnosis (median)": f"{mine['diagnose_seconds'].median():.3f}",
                "date": f.date[:10],
                "code": f.code,
            }
        )
    extra_frame = pd.DataFrame(extra)
    return table.merge(extra_frame, on="diagnoser", how="left").fillna("n/a")


def per_kind(frame: pd.DataFrame) -> pd.DataFrame:
    """Per diagnoser and kind of task: identification and false alarms on the full grid at
    the default sampling, with their intervals (a kind's tasks pooled)."""
    full = whole(frame)
    full = full[(full["grid"] == "full") & (full["every"] == DEFAULT_EVERY)]
    rows = []
    for (name, kind), part in full.groupby(["diagnoser", "task_kind"], sort=False):
        rows.append(
            {
                "diagnoser": name,
                "kind": kind,
                "tasks": ", ".join(dict.fromkeys(part["task"])),
                "identification": leaderboard.cell(scores.identification(part)["accuracy"]),
                "false alarms": leaderboard.cell(scores.false_alarms(part)),
            }
        )
    return pd.DataFrame(
        rows, columns=["diagnoser", "kind", "tasks", "identification", "false alarms"]
    )


def write(
    assembled: Assembled,
    board: Board,
    out: Path,
    *,
    evidence: Any = None,
    readme: Path | None = None,
) -> list[Path]:
    """Write the leaderboard's files and its site under ``out``; return their paths.

    ``evidence``: ``(diagnoser, row) -> str``, a wrong answer's evidence for the site
    (:func:`faultbench.reporting.submission.evidence_from`); ``readme``: a file whose
    :data:`MARKERS` get the headline between them (the project's README)."""
    from faultbench.reporting import site

    frame = whole(assembled.frame)
    grid = frame[frame["suite"] != REALBUGS]
    cut = assembled.frame[assembled.frame["suite"] != REALBUGS]  # every prefix
    top, full = headline(assembled), full_table(assembled, board)
    tables = {
        "leaderboard.csv": full,
        "leaderboard_tasks.csv": leaderboard.per_task(grid).reset_index(),
        "leaderboard_kinds.csv": per_kind(grid),
        "leaderboard_variants.csv": leaderboard.per_variant(grid),
        "false_alarms_by_axis.csv": leaderboard.alarms_by_axis(designs(grid)),
        "leaderboard_prefixes.csv": prefixes.table(cut),
    }
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in tables.items():
        table.to_csv(out / name, index=False, lineterminator="\n")
        written.append(out / name)
    texts = {
        "leaderboard.md": headline_markdown(top, assembled, tables["leaderboard_kinds.csv"]),
        "leaderboard_full.md": full_markdown(full, tables["leaderboard_kinds.csv"], assembled)
        + prefixes.markdown(tables["leaderboard_prefixes.csv"]),
    }
    for name, text in texts.items():
        (out / name).write_text(text)
        written.append(out / name)
    written.append(tradeoff_figure(assembled, out / "leaderboard.png"))
    written.append(prefixes.figure(cut, out / "leaderboard_prefixes.png"))
    written.append(
        leaderboard.levels_figure(
            grid[(grid["grid"] == "full") & (grid["every"] == DEFAULT_EVERY)],
            out / "leaderboard_levels.png",
        )
    )
    written += site.write(
        assembled, top, full, tables, out / "site", evidence=evidence, meanings=HEADLINE
    )
    if readme is not None and _put_headline(readme, top, out):
        written.append(readme)
    return written


#: The lines between which a README holds the generated headline.
MARKERS = ("<!-- leaderboard:start -->", "<!-- leaderboard:end -->")


def _put_headline(readme: Path, top: pd.DataFrame, out: Path) -> bool:
    """Write the headline between ``readme``'s :data:`MARKERS`; False if it has none."""
    try:
        text = readme.read_text()
    except OSError:
        return False
    start, end = MARKERS
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    out = out.resolve()
    where = out.relative_to(readme.parent) if out.is_relative_to(readme.parent) else out
    table = _shown(top).to_markdown(index=False, disable_numparse=True)
    block = f"{start}\n{SCORE}\n\n{table}\n\n![identification against false alarms]"
    block += f"({where.as_posix()}/leaderboard.png)\n{end}"
    readme.write_text(head + block + tail)
    return True


def _shown(top: pd.DataFrame) -> pd.DataFrame:
    """The headline's numbers as text: shares to 3 decimals, seconds to 2 digits."""
    shown = top.copy()
    for column in ("score", "identification", "false alarms", "held-out tasks", "real bugs"):
        shown[column] = [("n/a" if np.isnan(v) else f"{v:.3f}") for v in top[column]]
    shown["s/diagnosis"] = [("n/a" if np.isnan(v) else f"{v:.2g}") for v in top["s/diagnosis"]]
    return shown


def kinds_at_a_glance(top: pd.DataFrame, kinds: pd.DataFrame) -> pd.DataFrame:
    """Per kind of task, one cell per diagnoser (in the headline's order): identification /
    false alarms, without their intervals (those are in ``leaderboard_full.md``)."""
    value = kinds.assign(
        cell=[
            f"{i.split(' ')[0]} / {f.split(' ')[0]}"
            for i, f in zip(kinds["identification"], kinds["false alarms"], strict=True)
        ]
    )
    table = value.pivot(index="diagnoser", columns="kind", values="cell")
    return table.reindex(list(top["diagnoser"])).fillna("n/a").reset_index()


def headline_markdown(top: pd.DataFrame, assembled: Assembled, kinds: pd.DataFrame) -> str:
    """``leaderboard.md``: the ranked headline, what it means, the figure, the notes, then
    identification and false alarms per kind of task."""
    runs = len(whole(assembled.frame))
    riders = sorted(f.diagnoser for f in assembled.files if _contract(f).instrument)
    cost = (  # a trained run's diagnosis is cheap; an instrument's price is paid in training
        " ("
        + " and ".join(f"`{name}`" for name in riders)
        + (" also trains" if len(riders) == 1 else " also train")
        + " each run again with an instrument in the loop; what that adds to training: "
        "[timings.md](timings.md))"
        if riders
        else ""
    )
    return "\n".join(
        [
            "# Leaderboard",
            "",
            f"{len(assembled.files)} diagnosers, each scored on the same runs ({runs} answers, "
            "assembled from `diagnosers/*.json`). " + SCORE + " *Identification*: runs with a "
            "known fault named correctly; *false alarms*: healthy runs called faulty; both on "
            "the full grid (every run on its own drawn healthy design, each fault at its "
            "calibrated levels, traces read as the Monitor records them by default). "
            "*Held-out tasks*: identification on the tasks it was not tuned on. *Real bugs*: "
            "identification on the real-bug suite. *s/diagnosis*: median seconds per "
            f"diagnosis of a trained run{cost}. Intervals and every other column: "
            "[leaderboard_full.md](leaderboard_full.md); a page per diagnoser: "
            "[site/index.html](site/index.html).",
            "",
            _shown(top).to_markdown(index=False, disable_numparse=True),
            "",
            *[f"- {note}" for note in assembled.notes],
            *([""] if assembled.notes else []),
            "![identification against false alarms](leaderboard.png)",
            "",
            "## Per kind of task",
            "",
            "Identification / false alarms on the full grid, the kind's tasks pooled (tuned-on "
            "and held-out together; with intervals and the tasks: "
            "[leaderboard_full.md](leaderboard_full.md#per-kind-of-task)).",
            "",
            kinds_at_a_glance(top, kinds).to_markdown(index=False, disable_numparse=True),
            "",
        ]
    )


def full_markdown(full: pd.DataFrame, kinds: pd.DataFrame, assembled: Assembled) -> str:
    """``leaderboard_full.md``: every column with its interval, then per kind of task."""
    return "\n".join(
        [
            "# Leaderboard: every column",
            "",
            "Cells are shares with their 95% Wilson interval; *score* has its bootstrap "
            "interval. *Reference recipe*: the classic grid (the task's one recipe); *every "
            "step*: the full grid read at every step (n/a for a diagnoser that never reads the "
            "trace). *Known faults not healthy*: any alarm on a faulty run. *Held-out faults*: "
            "bugs outside the known ones (*not healthy* is detection). *Alarm precision*: of "
            "the alarms, the share on a faulty run. *Seconds*: as measured when each file was "
            "scored (its date and code are beside it).",
            "",
            full.to_markdown(index=False, disable_numparse=True),
            "",
            "## Per kind of task",
            "",
            kinds.to_markdown(index=False, disable_numparse=True),
            "",
            "Per task: `leaderboard_tasks.csv`; per variant: `leaderboard_variants.csv`; false "
            "alarms per value of each design axis: `false_alarms_by_axis.csv`.",
            "",
            "![identification recall by severity level](leaderboard_levels.png)",
            "",
        ]
    )


def pareto(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the best trade-offs: no other point has fewer false alarms (x) and at
    least as much identification (y), or as few and more; sorted by x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -np.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def tradeoff_figure(assembled: Assembled, path: Path) -> Path:
    """Identification against false alarms, one point per diagnoser with its Wilson
    intervals, the best trade-offs (:func:`pareto`) joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = whole(assembled.frame)
    names, points, errors = [], [], []
    for f in assembled.files:
        s = scores.summary(headline_part(frame[frame["diagnoser"] == f.diagnoser]))
        ident, alarms = s["identification"]["accuracy"], s["false_alarms"]
        if not ident.n or not alarms.n:
            continue
        names.append(f.diagnoser)
        points.append((alarms.value, ident.value))
        errors.append(
            (
                (alarms.value - alarms.low, alarms.high - alarms.value),
                (ident.value - ident.low, ident.high - ident.value),
            )
        )
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for name, (x, y), (ex, ey) in zip(names, points, errors, strict=True):
        ax.errorbar([x], [y], xerr=[[ex[0]], [ex[1]]], yerr=[[ey[0]], [ey[1]]], fmt="o",
                    capsize=2, alpha=0.8)  # fmt: skip
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    front = pareto(points)
    if front:
        ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "k--", lw=1,
                label="best trade-offs")  # fmt: skip
        ax.legend(fontsize="small", loc="lower right")
    ax.set_xlabel("false alarms: healthy drawn runs called faulty (95% Wilson)")
    ax.set_ylabel("identification: known faults named (95% Wilson)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})  # no version stamp: stable bytes
    plt.close(fig)
    return path
