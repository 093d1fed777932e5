"""Every bad input is answered by one clear line; the CLI exits 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from faultbench.cli import main as cli
from faultbench.core.errors import FaultbenchError
from faultbench.faults.fault import FAULTS, condition
from faultbench.scoring.diagnosis import get_diagnoser
from faultbench.scoring.evaluate import evaluate
from faultbench.tasks.task import get_task

TESTS = Path(__file__).parent


def _cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--task", "digts", "--diagnoser", "always-healthy"],
            "faultbench: error: Unknown task 'digts'. Did you mean 'digits'? Valid: ",
        ),
        (
            ["--task", "digits", "--diagnoser", "always-helthy"],
            "faultbench: error: Unknown diagnoser 'always-helthy'. Did you mean 'always-healthy'?",
        ),
        (
            ["--task", "digits", "--diagnoser", "no_such_module_xyz:Thing"],
            "faultbench: error: Cannot import 'no_such_module_xyz' from "
            "'no_such_module_xyz:Thing': ModuleNotFoundError",
        ),
        (
            ["--task", "digits", "--diagnoser", "bad_diagnosers:NOT_A_DIAGNOSER"],
            "faultbench: error: 'bad_diagnosers:NOT_A_DIAGNOSER' is not a diagnoser: expected an "
            "object with a str 'name'",
        ),
        (
            ["--task", "digits", "--diagnoser", "bad_diagnosers:Raisin"],
            "faultbench: error: Unknown attribute of module 'bad_diagnosers' 'Raisin'. "
            "Did you mean 'Raising'?",
        ),
    ],
)
def test_cli_rejects_bad_names_in_one_line(capsys, argv, line):
    code, last = _cli(capsys, "run", *argv)
    assert code == 2
    assert last.startswith(line)
    assert capsys.readouterr().err == ""  # nothing after that line


def test_cli_error_is_the_only_stderr_line(capsys):
    assert cli.main(["run", "--task", "digts", "--diagnoser", "always-healthy"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Did you mean 'digits'" in lines[0]


@pytest.mark.parametrize("seeds", ["0", "-3", "two"])
def test_cli_seeds_below_one_exit_2_naming_the_value(capsys, seeds):
    argv = ["run", "--task", "digits", "--diagnoser", "always-healthy", "--seeds", seeds]
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    shown = seeds if seeds != "two" else f"'{seeds}'"
    assert len(lines) == 1, lines  # one line, no usage block
    assert f"argument --seeds: expected an integer of at least 1; got {shown}" in lines[0]


def test_cli_unknown_names_through_a_real_process():
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "faultbench",
            "run",
            "--task",
            "digits",
            "--diagnoser",
            "bad_diagnosers:NOT_A_DIAGNOSER",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "is not a diagnoser" in proc.stderr


@pytest.mark.parametrize("seeds", [0, -1, 1.5, True])
def test_evaluate_rejects_seeds_below_one(seeds):
    with pytest.raises(
        FaultbenchError, match=re.escape(f"seeds must be an integer of at least 1; got {seeds!r}")
    ):
        evaluate("always-healthy", "digits", seeds=seeds)


def test_unknown_task_and_diagnoser_through_the_api():
    with pytest.raises(
        FaultbenchError, match=re.escape("Unknown task 'digts'. Did you mean 'digits'?")
    ):
        get_task("digts")
    with pytest.raises(
        FaultbenchError, match=re.escape("Unknown diagnoser 'randm'. Did you mean 'random'?")
    ):
        get_diagnoser("randm")


@pytest.mark.parametrize("fault", FAULTS.names())
def test_unknown_fault_name_suggests_the_nearest(fault):
    typo = fault[:-1]
    with pytest.raises(
        FaultbenchError, match=re.escape(f"Unknown fault '{typo}'. Did you mean '{fault}'?")
    ):
        condition(typo)


@pytest.mark.parametrize("fault", [n for n in FAULTS.names() if FAULTS.get(n).severity])
@pytest.mark.parametrize("side", ["low", "high"])
def test_severity_outside_its_range_is_refused(fault, side):
    sev = FAULTS.get(fault).severity
    value = sev.low / 2 - 1 if side == "low" else sev.high * 2 + 1
    with pytest.raises(
        FaultbenchError,
        match=re.escape(
            f"Severity {value:g} is out of range for fault '{fault}'; expected "
            f"{sev.low:g} to {sev.high:g}"
        ),
    ):
        condition((fault, value))
    assert condition((fault, sev.low)).faults == ((fault, sev.low),)  # the bounds are valid


def test_module_class_errors_through_the_api():
    with pytest.raises(
        FaultbenchError,
        match=re.escape("Cannot import 'no_such_module_xyz' from 'no_such_module_xyz:X'"),
    ):
        get_diagnoser("no_such_module_xyz:X")
    sys.path.insert(0, str(TESTS))
    try:
        with pytest.raises(
            FaultbenchError, match=re.escape("'bad_diagnosers:NOT_A_DIAGNOSER' is not a diagnoser")
        ):
            get_diagnoser("bad_diagnosers:NOT_A_DIAGNOSER")
        assert get_diagnoser("bad_diagnosers:Raising").name == "raising"
    finally:
        sys.path.remove(str(TESTS))


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "-inf", "soon"])
@pytest.mark.parametrize("verb", ["run", "report", "sweep", "pairs"])
def test_timeout_must_be_a_positive_number(capsys, verb, value):
    required = {
        "run": ["--task", "digits", "--diagnoser", "always-healthy"],
        "report": [],
        "sweep": ["--task", "digits", "--diagnoser", "rules", "--fault", "lr_too_high"],
        "pairs": ["--task", "digits", "--diagnoser", "rules"],
    }[verb]
    with pytest.raises(SystemExit) as exc:
        cli.main([verb, *required, f"--timeout={value}"])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    shown = value if value != "soon" else "'soon'"
    assert len(lines) == 1, lines
    assert f"argument --timeout: expected a positive number of seconds; got {shown}" in lines[0]


@pytest.mark.parametrize("timeout", [0, -5, float("nan"), float("inf"), True])
def test_evaluate_refuses_a_timeout_that_is_no_positive_number(timeout):
    with pytest.raises(FaultbenchError, match=re.escape("timeout must be a positive number")):
        evaluate("always-healthy", "digits", seeds=1, timeout=timeout)


TIMEOUT_ZERO = ("--diagnoser", "rules", "--timeout", "0")


def test_timeout_zero_through_a_real_process():
    proc = subprocess.run(
        [sys.executable, "-m", "faultbench", *("run", "--task", "digits"), *TIMEOUT_ZERO],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "argument --timeout: expected a positive number of seconds; got 0" in proc.stderr


def test_unknown_engine_suggests_the_nearest(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--task", "digits", "--diagnoser", "rules", "--engine", "locl"])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Unknown engine 'locl'. Did you mean 'local'?" in lines[0]


def test_a_diagnoser_that_cannot_reach_a_worker_is_refused_before_training(tmp_path):
    class Local:  # a class inside a function cannot be pickled by reference
        name = "local-class"
        tuned_on: frozenset[str] = frozenset()

        def diagnose(self, run):  # type: ignore[no-untyped-def]
            raise AssertionError("never called")

    with pytest.raises(FaultbenchError, match="cannot be sent to a worker process"):
        evaluate(Local(), "digits", seeds=1, store=tmp_path / "s")
    assert not (tmp_path / "s").exists()  # nothing trained, nothing written
