"""results/validity.*: the statistics written with stable bytes
(faultbench.reporting.validity_files)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from test_validity import GRID, answers

from faultbench.reporting import validity_files
from faultbench.reporting.validity_files import CHAR, PT, _placed


def test_files_are_written_with_the_same_bytes_twice(tmp_path: Path) -> None:
    grid = GRID.rename(index={"a": "rules", "b": "learned", "c": "random"})
    frame = answers().replace({"diagnoser": {"a": "rules", "b": "learned", "c": "random"}})
    first = validity_files.write(grid, frame, tmp_path / "a", reps=50)
    second = validity_files.write(grid, frame, tmp_path / "b", reps=50)
    names = [p.name for p in first]
    assert names == [
        "validity.md",
        "validity.csv",
        "validity_diagnosers.csv",
        "validity_kinds.csv",
        "validity_cases.csv",
        "validity.png",
    ]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    table = pd.read_csv(tmp_path / "a" / "validity.csv", dtype=str, keep_default_na=False)
    assert "identification kendall_tau" in set(table["statistic"])
    assert "false_alarms spearman_rho (no baselines)" in set(table["statistic"])
    assert "false_alarms spearman_rho [regression]" in set(table["statistic"])
    text = (tmp_path / "a" / "validity.md").read_text()
    assert "Known-label cases, by label: dead_units 1, lr_too_high 2." in text
    assert "## Faulty forms" in text and "## Fixed twins" in text
    assert (tmp_path / "a" / "validity.png").read_bytes()[:4] == b"\x89PNG"


def test_labels_of_nearby_points_do_not_overlap() -> None:
    labels = [((0.16, 0.174), ["autotrainer"]), ((0.199, 0.13), ["cockpit"]),
              ((0.26, 0.174), ["deepdiagnosis"]), ((0.262, 0.13), ["weightwatcher"])]  # fmt: skip
    placed = _placed(labels)
    assert [p[1] for p in placed] == ["autotrainer", "cockpit", "deepdiagnosis", "weightwatcher"]
    assert placed[0][2:] == ((5, 3), "left")  # the first label takes the first spot
    boxes = []
    for (x, y), text, (dx, dy), align in placed:
        width = len(text) * CHAR * PT[0]
        left = x + dx * PT[0] - (width if align == "right" else 0.0)
        bottom = y + dy * PT[1]
        boxes.append((left, bottom, left + width, bottom + 8 * PT[1]))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1], (a, b)
