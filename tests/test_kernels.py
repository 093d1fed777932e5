"""Pinned CPU kernels: every process that trains a benchmark run runs the same ones, so a
trace is the same bits whatever the processor offers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from faultbench.core import kernels
from faultbench.reporting import provenance
from faultbench.training.engine import LocalEngine

#: A fresh process that trains a run of each task and prints its losses.
TRAIN = """
import json, sys
from faultbench.faults.recipe import base_setup
from faultbench.tasks.task import get_task
from faultbench.training.loop import train
losses = {name: train(base_setup(get_task(name), 0)).trace.loss.tolist() for name in sys.argv[1:]}
print(json.dumps(losses))
"""
#: What an AVX2 processor would make MKL and oneDNN choose, imitated on a newer one.
AS_AVX2 = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def _unpinned_environment() -> dict[str, str]:
    """This process's environment without the pin (the suite's conftest sets it)."""
    return {k: v for k, v in os.environ.items() if k not in kernels.ENVIRONMENT}


def _python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )


def _capability(_: object) -> str:
    return kernels.capability()


def test_this_test_process_is_pinned() -> None:
    assert kernels.capability() == kernels.CAPABILITY
    assert all(os.environ[k] == v for k, v in kernels.ENVIRONMENT.items())


def test_a_local_pool_worker_runs_the_pinned_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in kernels.ENVIRONMENT:  # a parent that was never pinned, as a notebook
        monkeypatch.delenv(name)
    engine = LocalEngine(workers=1)
    try:
        assert [found for _, found in engine.map_unordered(_capability, [0])] == [
            kernels.CAPABILITY
        ]
    finally:
        engine.close()


def test_the_command_line_pins_its_process() -> None:
    shown = _python(
        "from faultbench.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "from faultbench.core.kernels import capability\n"
        "print('CAPABILITY', capability())",
        _unpinned_environment(),
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-1] == f"CAPABILITY {kernels.CAPABILITY}"


@pytest.mark.slow
def test_a_pinned_trace_is_the_same_bits_in_fresh_processes_whatever_the_processor() -> None:
    # The second process's libraries choose as on an AVX2 processor: unpinned, that
    # changes the losses of both runs on an AVX-512 machine (the shapes CNN ends at twice
    # the loss). A machine without AVX-512 compares two like processes.
    pinned = {**_unpinned_environment(), **kernels.ENVIRONMENT}
    runs = []
    for env in (pinned, {**pinned, **AS_AVX2}):
        shown = _python(TRAIN, env, "digits", "shapes")
        assert shown.returncode == 0, shown.stderr
        runs.append(json.loads(shown.stdout.splitlines()[-1]))
    for name in ("digits", "shapes"):
        assert np.array_equal(np.array(runs[0][name]), np.array(runs[1][name])), name


def test_a_process_whose_torch_ran_unpinned_refuses_to_train(tmp_path: Path) -> None:
    code = (
        "import sys, torch\n"
        "torch.ones(2).add_(1)  # torch's kernels are chosen here, unpinned\n"
        "if torch.backends.cpu.get_cpu_capability() == 'AVX2':\n"
        "    sys.exit(print('NATIVE AVX2'))  # a processor whose best is the pin\n"
        "from faultbench.core.kernels import Unpinned\n"
        "from faultbench.faults.fault import Condition\n"
        "from faultbench.storage.records import RunSpec\n"
        "from faultbench.storage.runner import ensure_records\n"
        "from faultbench.storage.store import Store\n"
        "from faultbench.tasks.task import get_task\n"
        "task = get_task('digits')\n"
        "spec = RunSpec(task.name, task.fingerprint, Condition(), 0)\n"
        "try:\n"
        "    list(ensure_records([spec], task, store=Store(sys.argv[1])))\n"
        "except Unpinned as exc:\n"
        "    print('REFUSED', exc)\n"
    )
    shown = _python(code, _unpinned_environment(), str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    if shown.stdout.startswith("NATIVE AVX2"):
        pytest.skip("this processor's own kernels are the pinned ones")
    assert shown.stdout.startswith("REFUSED this process runs torch's "), shown.stdout
    assert shown.stdout.count("\n") == 1  # one line
    assert "train on the local engine" in shown.stdout
    assert "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2" in shown.stdout
    assert not list(tmp_path.rglob("*.json"))  # no failed record stored: nothing trained


def test_backends_are_off_inside_and_the_callers_after() -> None:
    torch.backends.nnpack.set_flags(True)
    assert torch.backends.mkldnn.enabled
    with kernels.backends():
        assert not torch.backends.mkldnn.enabled
        assert torch.backends.nnpack.set_flags(False) == (False,)  # it was off
    assert torch.backends.mkldnn.enabled
    assert torch.backends.nnpack.set_flags(True) == (True,)  # and is on again


@pytest.mark.parametrize(
    ("vendor", "other_bits"),
    [("GenuineIntel", False), ("AuthenticAMD", True), ("HygonGenuine", True)],
)
def test_a_processor_not_intels_is_said_to_train_other_bits(
    tmp_path: Path, vendor: str, other_bits: bool
) -> None:
    """MKL runs the pinned AVX2 branch on Intel's processors only (docs/reproducibility.md):
    a report or a score made on another vendor's says its runs are other bits."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: 6\n\n" * 2)
    found = provenance.processor_vendor(cpuinfo)
    assert found == vendor
    note = provenance.other_bits_note(found)
    assert (note is not None) == other_bits
    assert note is None or (vendor in note and "docs/reproducibility.md" in note)


def test_a_vendor_that_cannot_be_read_is_unknown_and_noted_nowhere(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: a board\n")
    for source in (tmp_path / "cpuinfo", tmp_path / "absent"):
        assert provenance.processor_vendor(source) == "unknown"
    assert provenance.other_bits_note("unknown") is None
    assert provenance.machine()["processor vendor"] == provenance.processor_vendor()
