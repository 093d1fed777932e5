"""The house: a light start, plug-ins for every registry, dask as an extra (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HEAVY = ("sklearn", "pandas", "scipy", "matplotlib", "dask", "distributed")
VERBS = ("run", "list", "bench", "check", "devices", "doctor", "pairs", "paper", "preflight")


def _python(code: str, *, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=300,
    )


def _loaded_after(statement: str) -> set[str]:
    shown = _python(f"{statement}\nimport sys; print(' '.join(sorted(sys.modules)))")
    assert shown.returncode == 0, shown.stderr
    return {name.split(".")[0] for name in shown.stdout.split()}


@pytest.mark.parametrize(
    "statement", ["import faultbench", "from faultbench import Monitor", "import faultbench.cli"]
)
def test_import_loads_no_heavy_library(statement: str) -> None:
    loaded = _loaded_after(statement)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_monitor_import_loads_torch_and_nothing_heavier() -> None:
    assert "torch" in _loaded_after("from faultbench import Monitor")
    assert "torch" not in _loaded_after("import faultbench")


@pytest.mark.parametrize("verb", [None, *VERBS, "report", "sweep"])
def test_help_prints_without_torch(verb: str | None) -> None:
    argv = ["--help"] if verb is None else [verb, "--help"]
    shown = _python(
        "import sys\n"
        "from faultbench.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "print('LOADED', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    assert shown.returncode == 0, shown.stderr
    loaded = set(shown.stdout.split("LOADED", 1)[1].split())
    assert "usage: faultbench" in shown.stdout
    assert not loaded & {"torch", *HEAVY}, sorted(loaded & {"torch", *HEAVY})


def test_engine_dask_without_the_extra_is_one_line(tmp_path: Path) -> None:
    # A `distributed` that cannot be imported, as on an install without the extra.
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "distributed.py").write_text("raise ImportError('blocked for the test')\n")
    shown = subprocess.run(
        [*_cli(), "run", "--task", "digits", "--diagnoser", "always-healthy", "--engine", "dask"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(blocker)},
        timeout=300,
    )
    assert shown.returncode == 2
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1, shown.stderr
    assert "pip install 'faultbench[dask]'" in lines[0]
    assert not list((tmp_path / "store").glob("**/*.json"))  # nothing trained


def _cli() -> list[str]:
    return [sys.executable, "-m", "faultbench"]


PLUGIN = '''
"""A throwaway plug-in distribution: one fault, one task, one diagnoser."""
import numpy as np

from faultbench.faults.fault import Fault
from faultbench.scoring.diagnosis import Diagnosis
from faultbench.tasks.task import Task, TrainDefaults


def _tiny_lr(setup, severity):
    return setup.replace(lr=setup.lr * 1e-4)


tiny_lr = Fault("plug_tiny_lr", "a learning rate far below the working one", _tiny_lr, None)


def blobs():
    """Four Gaussian blobs in 5 dimensions, from the plug-in."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 60)
    X = rng.normal(size=(240, 5)) + 3.0 * np.eye(4, 5)[y]
    return Task.from_arrays("plug_blobs", X, y, defaults=TrainDefaults(steps=60))


class Constant:
    """The plug-in's diagnoser: always names the plug-in's fault."""

    name = "plug-constant"
    tuned_on = frozenset()

    def diagnose(self, run):
        return Diagnosis("plug_tiny_lr")
'''

ENTRY_POINTS = """\
[faultbench.faults]
plug_tiny_lr = fbplugin:tiny_lr
plug_broken = fbplugin_broken:anything

[faultbench.tasks]
plug_blobs = fbplugin:blobs

[faultbench.diagnosers]
plug-constant = fbplugin:Constant
"""


@pytest.fixture
def plugin_path(tmp_path: Path) -> Path:
    """A directory holding an installed plug-in (dist-info with entry points)."""
    site = tmp_path / "site"
    (site / "fbplugin-0.1.dist-info").mkdir(parents=True)
    (site / "fbplugin.py").write_text(textwrap.dedent(PLUGIN))
    (site / "fbplugin_broken.py").write_text("raise RuntimeError('this plug-in is broken')\n")
    (site / "fbplugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fbplugin\nVersion: 0.1\n"
    )
    (site / "fbplugin-0.1.dist-info" / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def _with_plugin(site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_cli(), *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        timeout=600,
    )


def test_list_shows_plugins_and_one_line_per_broken_one(plugin_path: Path) -> None:
    shown = _with_plugin(plugin_path, "list")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "plug_tiny_lr" in out and "a learning rate far below the working one" in out
    assert "plug_blobs" in out and "Four Gaussian blobs in 5 dimensions" in out
    assert "plug-constant" in out
    broken = [line for line in out.splitlines() if "plug_broken" in line]
    assert broken == [
        "broken fault plug-in 'plug_broken': fbplugin_broken:anything: "
        "RuntimeError: this plug-in is broken"
    ]
    for shipped in ("missing_zero_grad", "digits", "rules"):  # the rest still prints
        assert shipped in out


def test_plugin_fault_task_and_diagnoser_run_through_the_cli(plugin_path: Path) -> None:
    shown = _with_plugin(
        plugin_path,
        *("run", "--grid", "classic", "--task", "plug_blobs", "--diagnoser", "plug-constant"),
        *("--seeds", "1", "--json", "--engine", "serial"),
    )
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["task"] == "plug_blobs"
    assert report["diagnoser"] == "plug-constant"
    answers = {r["condition"]: r["predicted"] for r in report["runs"]}
    assert answers["plug_tiny_lr"] == "plug-tiny_lr".replace("-", "_")
    assert "healthy" in answers and "missing_zero_grad" in answers
    # The constant answer is right exactly on the plug-in fault's run.
    assert report["correct"] == 1
    assert report["total"] == len(answers)


def test_a_broken_plugin_named_on_the_cli_says_why(plugin_path: Path) -> None:
    shown = _with_plugin(
        plugin_path, "doctor", "--task", "digits", "--fault", "plug_broken", "--seed", "0"
    )
    assert shown.returncode == 2
    assert shown.stderr.strip().splitlines() == [
        "faultbench: error: fault plug-in 'plug_broken' failed to load: "
        "fbplugin_broken:anything: RuntimeError: this plug-in is broken"
    ]
