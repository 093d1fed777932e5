"""Where the results came from: configuration, versions, machine, and measured timings.

Everything here describes a report rather than scoring anything. The tables of
configuration (:func:`setup_table`, :func:`conditions_table`) are deterministic;
:func:`timing_table`, :func:`wait_table` and :func:`readme` hold what changes
between two reports or two machines (seconds, data-wait shares, dates, the
machine): :data:`WALL_CLOCK` names their files, the README lists them as such,
and no score is computed from them. Nothing written here names a path of the
machine that made it (no store, no home directory), so the files can be committed.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from fnmatch import fnmatch
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import FAULTS, HEALTHY, condition_names
from faultbench.faults.levels import LEVELS_FILE
from faultbench.reporting.report import Grid, fmt, spread
from faultbench.scoring.evaluate import Report, RunResult
from faultbench.storage.dataset import MANIFEST, Manifest
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


#: The files of results/ that hold wall-clock measurements or dates: they differ
#: between two reports of the same runs, and between machines.
WALL_CLOCK = {
    "README.md": "the date of the report, when and where its runs trained",
    "timings.csv": "seconds per diagnosis and per training run, measured",
    "timings.md": "the same seconds, and the data-wait share per condition",
    "waits.csv": "share of step time each run spent waiting for data, measured as it trained",
    "diagnosers/*.json": "each diagnoser's result header: when it was scored and the seconds "
    "it took (written again only when its answers change)",
    "bench.*": "the benchmark's own speed, measured by make bench (not by the report)",
}


def _volatile(name: str) -> bool:
    """Whether the file ``name`` is one of :data:`WALL_CLOCK`'s (which holds patterns)."""
    return any(fnmatch(name, pattern) for pattern in WALL_CLOCK)


def wait_table(grids: Mapping[str, Grid]) -> pd.DataFrame:
    """The data-wait share per task × condition (mean, sd, last seed): a wall-clock measurement.

    Each run measured it while it trained, so it moves with the machine and its load.
    """
    rows = []
    for task, grid in grids.items():
        seeds = sorted({seed for _, seed in grid})
        for cond in condition_names():
            shares = pd.Series(
                [_wait_share(grid.get((cond, s))) for s in seeds], index=seeds, dtype=float
            )
            rows.append({"task": task, "condition": cond, **spread(shares, "wait_share")})
    columns = ["task", "condition", "wait_share_mean", "wait_share_sd", "wait_share_last"]
    return pd.DataFrame(rows, columns=columns)


def _wait_share(record: object) -> float:
    trace = getattr(record, "trace", None)
    return float(trace.wait_share) if trace is not None else float("nan")


def timing_table(reports: Sequence[Report]) -> pd.DataFrame:
    """Measured seconds per diagnoser × task: these vary between reports, so live apart."""
    rows = []
    for report in sorted(reports, key=lambda r: (r.diagnoser, r.task)):
        diag = [r.diagnose_seconds for r in report.results]
        # A run not trained for this report (an instrument gave up at its first step, so
        # its record is the plain run's) has no training seconds: not a zero-second run.
        train = [r.train_seconds for r in report.results if r.train_seconds > 0]
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


def instrument_overhead_table(reports: Sequence[Report]) -> pd.DataFrame:
    """What each instrument added to training: per diagnoser with an instrument and task,
    the median over its runs of the run's training seconds with the instrument over the
    same run's seconds without it (another diagnoser's report of the same grid), as
    measured when each trained; a wall-clock figure, ``faultbench bench`` prices it apart."""

    def key(report: Report, r: RunResult) -> tuple[Any, ...]:
        design = tuple(sorted((k, str(v)) for k, v in r.design.items()))
        return (report.task, report.grid, r.condition, r.seed, r.variant, r.level, design)

    plain = {
        key(report, r): r.train_seconds
        for report in reports
        if not report.instruments
        for r in report.results
        if r.train_seconds > 0
    }
    rows = []
    for report in sorted(reports, key=lambda r: (r.diagnoser, r.task)):
        if not report.instruments or (report.grid == "full" and report.every == 1):
            continue  # one row per grid: the full grid read at every step is the same runs
        ratios = [
            r.train_seconds / plain[key(report, r)]
            for r in report.results
            if r.train_seconds > 0 and key(report, r) in plain
        ]
        rows.append(
            {
                "instrument": ", ".join(report.instruments),
                "diagnoser": report.diagnoser,
                "task": report.task,
                "grid": report.grid,
                "runs": len(ratios),
                "train_seconds_ratio_median": fmt(float(np.median(ratios)), 2) if ratios else "",
            }
        )
    columns = ["instrument", "diagnoser", "task", "grid", "runs", "train_seconds_ratio_median"]
    return pd.DataFrame(rows, columns=columns)


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


def source_root() -> Path | None:
    """The git work tree holding the faultbench code that runs now, or None (an install)."""
    here = Path(__file__).resolve().parents[1]  # the faultbench package
    try:
        top = _git(here, "rev-parse", "--show-toplevel").strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return Path(top) if (Path(top) / "faultbench").resolve() == here else None


#: The pages ``make report`` writes beside ``results/``: the README's headline and the
#: generated blocks of ``docs/`` (text, not code: no result depends on them).
PAGES = ("README.md", "docs")


def git_state(root: Path | None, *, out: Path | None = None) -> tuple[str, list[str]]:
    """The commit checked out at ``root`` and its changed tracked files, except ``out``,
    the severity levels file and :data:`PAGES`: ``make report`` writes them
    (``faultbench calibrate`` rewrites the levels before the report reads them), and
    commits them together.

    Returns:
        ("unknown (not a git checkout)", []) when ``root`` is None or not in git.
    """
    if root is None:
        return "unknown (not a git checkout)", []
    spec = ["--", "."]
    for output in (out, LEVELS_FILE):  # what make report writes: results/ and the levels
        if output is not None and output.resolve().is_relative_to(root.resolve()):
            spec.append(f":(exclude){output.resolve().relative_to(root.resolve())}")
    spec += [f":(exclude){page}" for page in PAGES]
    try:
        rev = _git(root, "rev-parse", "HEAD").strip()
        status = _git(root, "status", "--porcelain", "--untracked-files=no", *spec)
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)", []
    return rev, [line[3:] for line in status.splitlines() if line.strip()]


def require_clean(root: Path | None, *, out: Path, allow_dirty: bool) -> None:
    """Refuse to write results from code with uncommitted changes (``out`` itself aside).

    Raises:
        FaultbenchError: tracked files differ from the commit and ``allow_dirty`` is False.
    """
    _, changed = git_state(root, out=out)
    if changed and not allow_dirty:
        shown = ", ".join(changed[:3]) + (
            f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        )
        raise FaultbenchError(
            f"the code has uncommitted changes ({shown}); expected a clean git tree, so that "
            "the revision in results/README.md is the code that made them: commit or stash "
            "them, or pass --allow-dirty"
        )


def git_revision(root: Path | None = None, *, out: Path | None = None) -> str:
    """The commit checked out, ``+dirty`` when tracked files differ; ``unknown`` outside git."""
    rev, changed = git_state(source_root() if root is None else root, out=out)
    return f"{rev}{'+dirty' if changed else ''}"


def _git(where: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(where), *args], capture_output=True, text=True, check=True
    ).stdout


def package_versions() -> dict[str, str]:
    """Installed version of each package in :data:`PACKAGES`."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


#: The vendor whose processors run MKL's pinned branch (:mod:`faultbench.core.kernels`).
REFERENCE_VENDOR = "GenuineIntel"


def processor_vendor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's vendor as Linux names it (``GenuineIntel``, ``AuthenticAMD``, ...),
    or ``unknown`` where ``cpuinfo`` cannot be read or names none (another system)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return "unknown"
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "vendor_id" and value.strip():
            return value.strip()
    return "unknown"


def other_bits_note(vendor: str | None = None) -> str | None:
    """A note for a command that trains on a processor (this one's by default) whose runs are
    not the bits of ``results/`` (MKL runs the pinned AVX2 branch on Intel's processors only
    and its AUTO branch elsewhere, docs/reproducibility.md); None on Intel's, or where it is
    unknown."""
    vendor = processor_vendor() if vendor is None else vendor
    if vendor in (REFERENCE_VENDOR, "unknown"):
        return None
    return (
        f"this processor is {vendor}'s, and MKL runs its pinned AVX2 branch on Intel's only: "
        "runs trained here are other bits than the ones results/ was made of, so a score can "
        "differ from it (docs/reproducibility.md)"
    )


def machine() -> dict[str, str]:
    """What the report (and, for runs it trained, the training) ran on."""
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "processor vendor": processor_vendor(),
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
        "trained between (wall-clock)": f"{created[0]} and {created[-1]}" if created else "unknown",
    }


def dataset_summary(folder: Path) -> dict[str, str]:
    """Where and when the runs dataset shipped in ``folder`` was trained ({}: none there).

    The shipped folder's, whichever dataset the report's store read: it is the same file on
    every machine, so the lines are too."""
    if not (folder / MANIFEST).exists():
        return {}
    manifest = Manifest.read(folder)
    made = manifest.made
    return {
        "folder": f"`{folder.name}/` ({manifest.tier} tier, every {manifest.every} steps; "
        "docs/runs.md)",
        "runs": str(manifest.runs),
        "training code": manifest.training_code,
        "trained on": f"{made.get('host', 'unknown')}, processor {made.get('processor', 'unknown')}"
        f", python {made.get('python', 'unknown')}",
        "exported (wall-clock)": made.get("when", "unknown"),
    }


def readme(
    command: str,
    files: Sequence[str],
    grids: Mapping[str, Grid],
    trained_now: int,
    *,
    revision: str,
    dataset: Mapping[str, str] | None = None,
) -> str:
    """``results/README.md``: the files, how to regenerate them, and their provenance.

    Args:
        command: The ``faultbench report`` command line, without machine paths.
        files: The files written, relative to the results directory.
        grids: The stored runs the tables read.
        trained_now: Runs this report trained.
        revision: The git revision of the code (see :func:`git_revision`).
        dataset: The shipped runs dataset's provenance (:func:`dataset_summary`).
    """
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
        "Stored runs are reused; only missing ones are trained. Every file except the "
        "wall-clock ones below is identical between two reports of the same stored runs, "
        "and training is deterministic, so a fresh clone reproduces them.",
        "",
        "## Wall-clock measurements",
        "",
        "These files hold seconds, shares of time or dates measured on the machine below; "
        "they change from one report or machine to the next, and no score is computed "
        "from them:",
        "",
    ]
    lines += [f"- `{name}`: {why}" for name, why in WALL_CLOCK.items()]
    lines += ["", "## Files", ""]
    lines += [f"- `{name}`" + (" (wall-clock)" if _volatile(name) else "") for name in files]
    lines += [
        "",
        "## Provenance",
        "",
        f"- generated (wall-clock): {now}",
        f"- command: `{command}`",
        f"- git revision: {revision}",
        "- record store: as given to the command (a path on the machine that made these, "
        "not recorded)",
        f"- runs trained by this report: {trained_now}",
    ]
    lines += [f"- {k}: {v}" for k, v in records_summary(grids).items()]
    if dataset:
        lines += ["", "### The runs dataset", ""] + [f"- {k}: {v}" for k, v in dataset.items()]
    lines += ["", "### Machine", ""] + [f"- {k}: {v}" for k, v in machine().items()]
    lines += ["", "### Package versions", ""]
    lines += [f"- {k}: {v}" for k, v in package_versions().items()]
    return "\n".join(lines) + "\n"
