"""The real-bug suite in ``results/``: ``realbugs.md`` and its tables.

Everything here reads one table: every shipped diagnoser's answers on every form of
every case (:meth:`faultbench.tools.realbugs.RealBugsReport.answers_frame`, one frame
per diagnoser, concatenated), in the columns of :data:`faultbench.scoring.scores.COLUMNS`
plus the case's and the doctor's. The shares are :mod:`faultbench.scoring.scores`' on
it, as the grid's are, each with its 95% Wilson interval:

- *identification*: faulty forms of the cases whose bug is one of the nine known
  faults, named correctly;
- *out-of-list not healthy* / *other_fault*: faulty forms of the cases outside the
  nine, not called healthy / called ``other_fault``;
- *false alarms*: fixed twins called anything but healthy;
- *doctor right*: the doctor's headline on the same run says not healthy on a faulty
  form and healthy on a fixed twin.

The same shares are given on the faithful cases alone (the source's own data, model and
code: :attr:`faultbench.realbugs.Case.faithful`), and ``realbugs.md`` shows every case's
fidelity: what stands in for the source's data, model and code, whether the reporter saw
the failure, and the reported effect beside the re-enacted one.

No wall-clock number is written, so the files' bytes are the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from faultbench.realbugs import DROPPED, OWN, SUITE, all_cases, counts_by_label
from faultbench.realbugs.case import FAITHFUL
from faultbench.scoring import scores
from faultbench.scoring.scores import Share

#: The real-bug score columns of ``realbugs.md``, in order, with what each counts (the
#: leaderboard's first four, :mod:`faultbench.reporting.assemble`, are the same shares).
COLUMNS = {
    "real-bug identification": "known-label cases' faulty forms named correctly",
    "real-bug out-of-list not healthy": "other_fault cases' faulty forms not called healthy",
    "real-bug out-of-list other_fault": "other_fault cases' faulty forms called other_fault",
    "real-bug false alarms": "fixed twins called anything but healthy",
    "real-bug doctor right": "the doctor's headline: not healthy on faulty, healthy on fixed",
}
#: The columns of ``realbugs_answers.csv`` (no seconds: the file is machine-independent).
ANSWER_COLUMNS = (
    "diagnoser",
    "case",
    "label",
    "model",
    "form",
    "truth",
    "predicted",
    "status",
    "correct",
    "headline",
    "headline_verdict",
    "headline_correct",
)


def cell(share: Share) -> str:
    """A share as the leaderboard writes it: value [low, high]."""
    return "n/a" if not share.n else f"{share.value:.3f} [{share.low:.2f}, {share.high:.2f}]"


def shares(answers: pd.DataFrame) -> dict[str, dict[str, Share]]:
    """Per diagnoser (in order of appearance): each of :data:`COLUMNS` as a share."""
    out = {}
    for name in dict.fromkeys(answers["diagnoser"]):
        part = answers[answers["diagnoser"] == name]
        detection = scores.detection(part)
        right = part["headline_correct"].to_numpy(dtype=bool)
        out[str(name)] = dict(
            zip(
                COLUMNS,
                (
                    scores.identification(part)["accuracy"],
                    detection["not_healthy"],
                    detection["other_fault"],
                    scores.false_alarms(part),
                    scores.wilson(int(right.sum()), int(right.size)),
                ),
                strict=True,
            )
        )
    return out


def columns(answers: pd.DataFrame) -> pd.DataFrame:
    """The real-bug score columns: one row per diagnoser, cells with intervals."""
    rows = [
        {"diagnoser": name, **{column: cell(share) for column, share in found.items()}}
        for name, found in shares(answers).items()
    ]
    return pd.DataFrame(rows, columns=["diagnoser", *COLUMNS])


def score_table(answers: pd.DataFrame) -> pd.DataFrame:
    """``realbugs.csv``: per diagnoser, each share's hits, n, value and interval (numbers)."""
    rows = []
    for name, found in shares(answers).items():
        row: dict[str, object] = {"diagnoser": name}
        for column, share in found.items():
            key = column.removeprefix("real-bug ").replace(" ", "_").replace("-", "_")
            row[f"{key}_hits"], row[f"{key}_n"] = share.hits, share.n
            for part in ("value", "low", "high"):
                number = getattr(share, part)
                row[f"{key}_{part}"] = "" if not share.n else f"{number:.3f}"
        rows.append(row)
    return pd.DataFrame(rows)


def case_table() -> pd.DataFrame:
    """``realbugs_cases.csv``: every shipped case, its label, task kind, model, optimizer,
    symptom, source, fidelity (data, model, code, observed, faithful), the reported and the
    re-enacted effect, and the reference its twin is held to."""
    return pd.DataFrame(
        [
            {
                "case": c.name,
                "label": c.label,
                "kind": c.kind,
                "model": c.model,
                "optimizer": c.optimizer,
                "symptom": str(c.symptom),
                "source": c.source,
                "data": c.fidelity_data,
                "model_fidelity": c.fidelity_model,
                "code": c.fidelity_code,
                "observed": c.observed,
                "faithful": c.faithful,
                "reported_effect": c.reported_effect,
                "reenacted_effect": c.reenacted_effect,
                "reference": c.reference.score,
            }
            for c in all_cases()
        ]
    )


def faithful_names() -> list[str]:
    """The faithful cases, by name."""
    return [c.name for c in all_cases() if c.faithful]


def _own(value: str) -> str:
    return "own" if value == OWN else value.removeprefix("stand-in: ")


def fidelity_table() -> pd.DataFrame:
    """``realbugs.md``'s fidelity table: per case, what stands in for what, side by side
    with the effect the source reports and the one the script re-enacts."""
    return pd.DataFrame(
        [
            {
                "case": c.name,
                "kind": c.kind,
                "label": c.label,
                "faithful": "yes" if c.faithful else "",
                "data": _own(c.fidelity_data),
                "model": _own(c.fidelity_model),
                "code": _own(c.fidelity_code),
                "observed": "yes" if c.observed else "no (read from code)",
                "reported effect": c.reported_effect,
                "re-enacted effect": c.reenacted_effect,
            }
            for c in all_cases()
        ]
    )


def matrix(answers: pd.DataFrame) -> pd.DataFrame:
    """Per case and form, each diagnoser's answer (``✓`` where right), and the share right."""
    names = list(dict.fromkeys(answers["diagnoser"]))
    rows = []
    for (case, form), part in answers.groupby(["case", "form"], sort=False):
        by = {r.diagnoser: r for r in part.itertuples(index=False)}
        row: dict[str, object] = {
            "case": case,
            "form": form,
            "truth": part["truth"].iloc[0],
        }
        for name in names:
            r = by.get(name)
            answer = "-" if r is None else (r.predicted if r.status == "ok" else r.status)
            row[name] = answer + (" ✓" if r is not None and r.correct else "")
        right = int(part["correct"].sum())
        row["right"] = f"{right}/{len(part)}"
        rows.append(row)
    return pd.DataFrame(rows)


def answer_table(answers: pd.DataFrame) -> pd.DataFrame:
    """``realbugs_answers.csv``: every answer, without wall-clock columns."""
    return answers.loc[:, list(ANSWER_COLUMNS)].reset_index(drop=True)


def markdown(answers: pd.DataFrame) -> str:
    """``realbugs.md``: the suite, every diagnoser's scores on it (on all cases and on the
    faithful ones), every case's fidelity, and every answer."""
    from faultbench.reporting.report import markdown_table

    cases = case_table()[["case", "label", "kind", "model", "optimizer", "symptom", "source"]]
    labels = ", ".join(f"{label} {n}" for label, n in counts_by_label().items())
    kinds = ", ".join(f"{k} {n}" for k, n in cases["kind"].value_counts().sort_index().items())
    table = columns(answers)
    faithful = faithful_names()
    on_faithful = columns(answers[answers["case"].isin(faithful)])
    dropped = pd.DataFrame([{"case": d.name, "source": d.source, "why": d.why} for d in DROPPED])
    return "\n".join(
        [
            "# Real bugs, reported in public",
            "",
            f"{len(cases)} training bugs reported in public (forum threads, Stack Overflow, "
            f"GitHub issues), each re-enacted in the reporter's style with its fixed twin "
            f"(`faultbench run --task {SUITE}`; the cases are `realbugs/cases/`). Labels: "
            f"{labels}. Task kinds: {kinds}. The suite is a test set: no shipped diagnoser "
            "was tuned on it. "
            "Cells are shares with their 95% Wilson interval: "
            + "; ".join(f"*{c.removeprefix('real-bug ')}*: {what}" for c, what in COLUMNS.items())
            + ". Every answer: `realbugs_answers.csv`; the grid against the suite: "
            "`validity.md`.",
            "",
            markdown_table(table),
            "",
            f"## On the faithful cases alone ({len(faithful)})",
            "",
            f"A case is faithful when it uses {FAITHFUL}. The same shares on those cases "
            "only (`realbugs_faithful.csv`):",
            "",
            markdown_table(on_faithful),
            "",
            "## Fidelity",
            "",
            "Per case: what stands in for the source's data, model and code (*own*: the "
            "source's), whether the reporter saw the failure or it was read from code (then "
            "the symptom is the suite's choice), and the effect the source reports beside "
            "the one the script re-enacts.",
            "",
            markdown_table(fidelity_table()),
            "",
            "## The cases",
            "",
            markdown_table(cases),
            "",
            "## Every answer (✓: right)",
            "",
            markdown_table(matrix(answers)),
            "",
            f"## Dropped ({len(DROPPED)}): written, then left out",
            "",
            markdown_table(dropped),
            "",
        ]
    )


def write(answers: pd.DataFrame, out: Path) -> list[Path]:
    """Write ``realbugs.md`` and its CSVs (scores on all cases and on the faithful ones,
    cases, answers) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    frames = {
        "realbugs.csv": score_table(answers),
        "realbugs_faithful.csv": score_table(answers[answers["case"].isin(faithful_names())]),
        "realbugs_cases.csv": case_table(),
        "realbugs_answers.csv": answer_table(answers),
    }
    written = []
    for name, frame in frames.items():
        frame.to_csv(out / name, index=False, lineterminator="\n")
        written.append(out / name)
    (out / "realbugs.md").write_text(markdown(answers))
    return [out / "realbugs.md", *written]
