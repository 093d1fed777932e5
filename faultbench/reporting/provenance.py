"""Where the results came from: configuration, versions, machine, and measured timings.

Everything here describes a report rather than scoring anything. The tables of
configuration (:func:`setup_table`, :func:`conditions_table`) are deterministic;
:func:`timing_table` and :func:`readme` hold what changes between two reports
(seconds, dates, the machine), and are kept out of the identity check.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from faultbench.faults.fault import FAULTS, HEALTHY, condition_names
from faultbench.reporting.report import Grid, fmt
from faultbench.scoring.evaluate import Report
from faultbench.tasks.task import get_task

#: Packages whose versions can change a number in results/.
PACKAGES = (
    "faultbench",
    "torch",
    "numpy",
    "scipy",
    "scikit-learn",
    "pandas",
    "matplotlib",
    "markdown",
)


def timing_table(reports: Sequence[Report]) -> pd.DataFrame:
    """Measured seconds per diagnoser × task: these vary between reports, so live apart."""
    rows = []
    for report in sorted(reports, key=lambda r: (r.diagnoser, r.task)):
        diag = [r.diagnose_seconds for r in report.results]
        train = [r.train_seconds for r in report.results]
        rows.append(
            {
                "diagnoser": report.diagnoser,
                "task": report.task,
                "diagnose_seconds_mean": fmt(float(np.mean(diag)) if diag else None, 4),
                "diagnose_seconds_total": fmt(float(np.sum(diag)), 2),
                "train_seconds_mean": fmt(float(np.mean(train)) if train else None, 2),
            }
        )
    return pd.DataFrame(rows)


def conditions_table() -> pd.DataFrame:
    """The ten conditions: what is broken and the canonical severity of its knob."""
    rows = [
        {
            "condition": HEALTHY,
            "summary": "nothing is broken",
            "severity": "",
            "severity_meaning": "",
        }
    ]
    for name in FAULTS.names():
        fault, sev = FAULTS.get(name), FAULTS.get(name).severity
        rows.append(
            {
                "condition": name,
                "summary": fault.summary,
                "severity": f"{sev.canonical:g}" if sev else "",
                "severity_meaning": sev.meaning if sev else "",
            }
        )
    return pd.DataFrame(rows)


def setup_table(tasks: Sequence[str], seeds: int) -> pd.DataFrame:
    """The canonical configuration per task: data shape and training defaults."""
    rows = []
    for name in tasks:
        task = get_task(name)
        d = task.defaults
        rows.append(
            {
                "task": name,
                "classes": str(task.n_classes),
                "features": str(task.n_features),
                "train_examples": str(len(task.y_train)),
                "val_examples": str(len(task.y_val)),
                "hidden": str(d.hidden),
                "lr": f"{d.lr:g}",
                "batch_size": str(d.batch_size),
                "steps": str(d.steps),
                "seeds": str(seeds),
                "faults": str(len(FAULTS)),
                "conditions": str(len(condition_names())),
            }
        )
    return pd.DataFrame(rows)


def git_revision(root: Path | None = None) -> str:
    """The commit checked out, ``+dirty`` when tracked files differ; ``unknown`` outside git."""
    where = str(root or Path.cwd())
    try:
        rev = subprocess.run(
            ["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{rev}{'+dirty' if dirty else ''}"


def package_versions() -> dict[str, str]:
    """Installed version of each package in :data:`PACKAGES`."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def machine() -> dict[str, str]:
    """What the report (and, for runs it trained, the training) ran on."""
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu cores": str(os.cpu_count()),
        "torch threads": str(torch.get_num_threads()),
        "accelerator": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU)",
    }


def records_summary(grids: Mapping[str, Grid]) -> dict[str, str]:
    """How many stored runs the tables read, which code made them, where and when."""
    records = [r for grid in grids.values() for r in grid.values() if r is not None]
    failed = sum(r is None for grid in grids.values() for r in grid.values())
    created = sorted(r.created for r in records if r.created)
    return {
        "runs read": str(len(records)),
        "runs that failed to train": str(failed),
        "code versions": ", ".join(sorted({r.code_version for r in records})) or "none",
        "trained on hosts": ", ".join(sorted({r.host for r in records if r.host})) or "unknown",
        "trained between": f"{created[0]} and {created[-1]}" if created else "unknown",
    }


def readme(
    command: str,
    files: Sequence[str],
    grids: Mapping[str, Grid],
    trained_now: int,
    store: str,
) -> str:
    """``results/README.md``: the files, how to regenerate them, and their provenance."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    lines = [
        "# results/",
        "",
        "Generated by `faultbench report` from stored run records; do not edit by hand.",
        "",
        "## Regenerate",
        "",
        "```sh",
        "make run                       # sets up .venv (and trains the main job's runs)",
        f"{command}",
        "faultbench paper               # paper/build/paper.html from these tables",
        "```",
        "",
        "Stored runs are reused; only missing ones are trained. Every table except "
        "`timings.*` and this file is identical between two reports of the same stored runs.",
        "",
        "## Files",
        "",
    ]
    lines += [f"- `{name}`" for name in files]
    lines += [
        "",
        "## Provenance",
        "",
        f"- generated: {now}",
        f"- command: `{command}`",
        f"- git revision: {git_revision()}",
        f"- record store: `{store}`",
        f"- runs trained by this report: {trained_now}",
    ]
    lines += [f"- {k}: {v}" for k, v in records_summary(grids).items()]
    lines += ["", "### Machine", ""] + [f"- {k}: {v}" for k, v in machine().items()]
    lines += ["", "### Package versions", ""]
    lines += [f"- {k}: {v}" for k, v in package_versions().items()]
    return "\n".join(lines) + "\n"
