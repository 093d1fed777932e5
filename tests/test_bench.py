"""``faultbench bench --quick`` prints every figure (timings are never asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from faultbench.scoring.diagnosis import diagnoser_names
from faultbench.tools.bench import median_interval
from faultbench.training.instruments import INSTRUMENTS

NUMBER = r"-?\d+\.\d+"


@pytest.fixture(scope="module")
def bench_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the bench wrote its figures (--results)."""
    return tmp_path_factory.mktemp("results")


@pytest.fixture(scope="module")
def bench_output(bench_results: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "faultbench", "bench", "--quick", "--results", str(bench_results)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def figure(output: str, number: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(f"{number}. ")]
    assert len(lines) == 1, output
    return lines[0]


def test_bench_names_the_machine(bench_output: str) -> None:
    first = bench_output.splitlines()[0]
    assert first.startswith("faultbench bench --quick on ")
    assert re.search(r"\d+ cores available", first)


@pytest.mark.parametrize(
    ("number", "goal"),
    [
        ("1a", "<= 1.25"),
        ("1b", "<= 1.10"),
        ("1c", "<= 1.03"),
        ("1d", None),
        ("3", ">= 0.85"),
        ("4a", None),
        ("4b", "trains nothing"),
        ("5", None),
    ],
)
def test_bench_prints_each_measured_figure(
    bench_output: str, number: str, goal: str | None
) -> None:
    line = figure(bench_output, number)
    assert re.search(rf": {NUMBER}", line), line
    if goal is not None:
        assert f"goal {goal}" in line and re.search(r"\((met|NOT met)\)", line), line


def test_bench_probe_ratio_uses_rules_when_registered(bench_output: str) -> None:
    line = figure(bench_output, "2")
    if "rules" in diagnoser_names():
        assert re.search(rf": {NUMBER}x  goal <= 0.5", line), line
        assert "probe steps per diagnosis" in line
    else:
        assert "n/a" in line and "not available yet" in line


def test_bench_warm_rescoring_trained_nothing(bench_output: str) -> None:
    line = figure(bench_output, "4b")
    assert "trained 0" in line and "process pool started: no" in line and "(met)" in line
    cold = figure(bench_output, "4a")
    assert re.search(r"(\d+) runs trained \1,", cold), cold  # a fresh store trains every run


@pytest.mark.parametrize("number", ["1a", "1b"])
def test_bench_prices_recording_and_evaluations_apart(bench_output: str, number: str) -> None:
    line = figure(bench_output, number)
    assert re.search(rf"every step .* {NUMBER}; the evaluations alone \(.*\) {NUMBER}", line), line


@pytest.mark.parametrize(
    ("number", "model"), [("1a", "digits"), ("1b", "shapes"), ("1c", "ResNet")]
)
def test_bench_gives_each_overhead_median_an_interval(
    bench_output: str, number: str, model: str
) -> None:
    line = figure(bench_output, number)
    found = re.search(rf"^{number}\. [^:]*: ({NUMBER})x.*95% interval ({NUMBER})-({NUMBER})", line)
    assert found and model in line, line
    value, low, high = map(float, found.groups())
    assert low <= value <= high, line
    assert re.search(r"steps of \d+\.\d+ ms bare", line), line


@pytest.mark.parametrize("n", [25, 50])
def test_median_interval_takes_the_binomial_order_statistics(n: int) -> None:
    # Ranks 8 and 18 (of 25) and 18 and 33 (of 50), 1-based: the narrowest
    # symmetric pair with P(Binomial(n, 1/2) < rank) <= 2.5% each side.
    expected = {25: (7, 17), 50: (17, 32)}[n]
    assert median_interval([float(v) for v in reversed(range(n))]) == expected


def test_median_interval_covers_the_median_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(0)
    samples = rng.standard_normal((2000, 50))  # true median 0
    covered = [low <= 0 <= high for low, high in map(median_interval, samples.tolist())]
    assert 0.95 <= np.mean(covered) <= 0.985  # exact coverage 96.7% for n = 50


def test_median_interval_of_few_values_is_their_range() -> None:
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert median_interval([2.0]) == (2.0, 2.0)


def test_overhead_parts_script_prints_each_part() -> None:
    script = os.path.join(os.path.dirname(__file__), "..", "bench", "overhead_parts.py")
    done = subprocess.run(
        [sys.executable, script, "--rounds", "1"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    for part in ("bare", "evaluations", "sparse", "instrumented"):
        assert re.search(rf"^  {re.escape(part)} +{NUMBER}x", done.stdout, re.M), done.stdout
    assert re.search(r"^  bare +1\.000x", done.stdout, re.M), done.stdout


@pytest.mark.parametrize("name", INSTRUMENTS.names())
def test_bench_prints_each_instruments_overhead_on_the_three_step_sizes(
    bench_output: str, name: str
) -> None:
    number = 6 + INSTRUMENTS.names().index(name)
    for letter, model in zip("abc", ("digits MLP", "shapes CNN", "small ResNet"), strict=True):
        line = figure(bench_output, f"{number}{letter}")
        found = re.search(
            rf"instrument '{name}' / bare loop, time per step \({model}\): ({NUMBER})x", line
        )
        assert found and float(found.group(1)) > 0, line
        assert re.search(rf"95% interval ({NUMBER})-({NUMBER})", line), line


def test_bench_keeps_each_printed_figure_in_results(bench_output: str, bench_results: Path) -> None:
    kept = pd.read_csv(bench_results / "bench.csv", dtype=str, keep_default_na=False)
    printed = [line for line in bench_output.splitlines() if re.match(r"\d+[a-z]?\. ", line)]
    assert len(kept) == len(printed) >= 7
    for row, line in zip(kept.itertuples(index=False), printed, strict=True):
        assert line.startswith(f"{row.figure}: ")
        assert (f": {row.value}{row.unit}" in line) if row.value else ": n/a" in line
    page = (bench_results / "bench.md").read_text()
    assert "`faultbench bench --quick`" in page and "cores available" in page
    assert all(f"| {name} " in page for name in kept["figure"])
