"""`faultbench devices`: the same training timed on every device, transfers included."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

from faultbench.cli.main import main
from faultbench.core.errors import FaultbenchError
from faultbench.tools.devices import (
    QUICK_BATCHES,
    QUICK_WIDTHS,
    DeviceTable,
    available_devices,
    compare_devices,
)


def test_quick_table_has_one_row_per_device_and_size() -> None:
    table = compare_devices(QUICK_WIDTHS, QUICK_BATCHES, steps=2)
    rows = table.rows
    expected = len(available_devices()) * len(QUICK_WIDTHS) * len(QUICK_BATCHES)
    assert len(rows) == expected
    assert (rows["ms_per_step"] > 0).all()
    assert (
        rows["examples_per_s"]
        .round(6)
        .equals((rows["batch"] / (rows["ms_per_step"] / 1e3)).round(6))
    )
    assert (rows[rows["device"] == "cpu"]["speedup_vs_cpu"] == 1.0).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cpu_only_machine_says_there_is_no_accelerator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["devices", "--quick", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No accelerator found")
    cpu_rows = [line for line in out.splitlines() if re.match(r"\s*cpu\s", line)]
    assert len(cpu_rows) == len(QUICK_WIDTHS) * len(QUICK_BATCHES)


def _synthetic(cuda_ms: list[float]) -> DeviceTable:
    sizes = [(64, 32), (64, 1024), (4096, 32), (4096, 1024)]
    cpu_ms = [1.0, 4.0, 6.0, 100.0]
    rows = pd.DataFrame(
        [
            {"device": d, "hidden": w, "batch": b, "ms_per_step": ms, "speedup_vs_cpu": c / ms}
            for d, times in (("cpu", cpu_ms), ("cuda", cuda_ms))
            for (w, b), ms, c in zip(sizes, times, cpu_ms, strict=True)
        ]
    )
    return DeviceTable(rows, ("cuda",))


def test_pays_from_is_the_smallest_size_where_the_gpu_wins() -> None:
    table = _synthetic([3.0, 5.0, 2.0, 10.0])  # wins at (4096, 32) and (4096, 1024)
    assert table.pays_from("cuda") == (4096, 32)
    assert "cuda starts to pay at hidden 4096, batch 32" in str(table)


def test_a_gpu_that_never_wins_is_reported_so() -> None:
    table = _synthetic([3.0, 5.0, 7.0, 120.0])
    assert table.pays_from("cuda") is None
    assert "cuda: never 1.25x faster than the CPU at these sizes" in str(table)


def test_a_win_within_timing_noise_does_not_count() -> None:
    table = _synthetic([3.0, 5.0, 5.8, 10.0])  # 1.03x at (4096, 32) is noise; 10x is not
    assert table.pays_from("cuda") == (4096, 1024)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": 0}, "need steps >= 1"),
        ({"devices": ["cuda:7"] if torch.cuda.is_available() else ["cuda"]}, "Unknown device"),
    ],
)
def test_bad_arguments_are_one_clear_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(FaultbenchError, match=re.escape(message)):
        compare_devices(QUICK_WIDTHS, QUICK_BATCHES, **kwargs)  # type: ignore[arg-type]


def test_cli_rejects_zero_steps(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["devices", "--steps", "0"])
    assert exit_info.value.code == 2
    assert "expected an integer of at least 1; got 0" in capsys.readouterr().err
