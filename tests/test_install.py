"""The install the README uses cannot be shadowed by a folder named ``faultbench``.

Run from a folder that holds a clone called ``faultbench`` (or any folder of that
name without an ``__init__.py``), Python's path finder used to take that folder as
an empty namespace package, because setuptools' default editable hook comes after
it: ``module 'faultbench' has no attribute 'evaluate'``. The Makefile installs in
strict editable mode (a link tree on sys.path), which a namespace folder cannot beat.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IMPORTS = (
    "import faultbench, faultbench.datasets, faultbench.diagnosers; "
    "print(faultbench.evaluate.__module__, faultbench.get_task('digits').name)"
)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("shadow", ["empty folder", "clone root"])
def test_a_faultbench_folder_in_the_working_directory_does_not_shadow_the_install(
    tmp_path: Path, shadow: str
) -> None:
    folder = tmp_path / "faultbench"
    folder.mkdir()
    if shadow == "clone root":  # what a clone looks like: the package one level down
        (folder / "faultbench").mkdir()
        (folder / "README.md").write_text("a clone\n")
    proc = _python(IMPORTS, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["faultbench.scoring.evaluate", "digits"]


def test_the_cli_works_beside_a_faultbench_folder(tmp_path: Path) -> None:
    (tmp_path / "faultbench").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "faultbench", "list"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "digits" in proc.stdout and "rules" in proc.stdout


def test_imports_from_the_checkout_root_find_the_shipped_data_and_diagnosers() -> None:
    # From the root, the source folder comes first; it must still see datasets/ and
    # diagnosers/, which are installed under faultbench but live beside it.
    proc = _python(IMPORTS, REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["faultbench.scoring.evaluate", "digits"]
