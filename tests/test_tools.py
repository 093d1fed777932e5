"""The real tools through adapters: lr-range, weightwatcher, cockpit (issue 20, part 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.diagnosers import _tools, cockpit_tool, lr_range, weightwatcher_tool
from faultbench.faults.architectures import Network, build
from faultbench.faults.fault import base_setup, condition, condition_names
from faultbench.faults.recipe import BatchStream
from faultbench.scoring.diagnosis import get_diagnoser
from faultbench.scoring.evaluate import run_for
from faultbench.scoring.harness import diagnose_safely
from faultbench.scoring.run import Probe, Run
from faultbench.tasks.task import get_task
from faultbench.tools.checks import run_checks
from faultbench.training.model import build_model

ROOT = Path(__file__).resolve().parents[1]
MODULES = {"lr-range": lr_range, "weightwatcher": weightwatcher_tool, "cockpit": cockpit_tool}
#: The module each adapter imports first, blocked to stand for a missing extra.
TOOL_MODULE = {
    "lr-range": "torch_lr_finder",
    "weightwatcher": "weightwatcher",
    "cockpit": "cockpit",
}
#: A fault each adapter names on digits, with the symptom its docs say decides it.
CLEAR_FAULT = {
    "lr-range": ("lr_too_high", "rate_above_suggestion"),
    "weightwatcher": ("lr_too_high", "spectral_norm_blown_up"),
    "cockpit": ("huge_inputs", "start_loss_high"),
}
pytestmark = pytest.mark.slow


def _run(grid, fault: str, seed: int = 0) -> Run:
    return run_for(grid[(fault, seed)], get_task("digits"))


def _diagnose(name: str, run: Run):
    outcome = diagnose_safely(get_diagnoser(name), run, timeout=600)
    assert outcome.status == "ok", outcome.message
    return outcome


# -- what each adapter answers, and the numbers behind it ------------------------------


@pytest.mark.parametrize("name", MODULES)
def test_healthy_run_is_healthy(digits_grid, name: str) -> None:
    outcome = _diagnose(name, _run(digits_grid, "healthy"))
    assert outcome.label == "healthy"
    assert outcome.evidence["decided_by"] == "no symptom"
    assert not any(outcome.evidence["present"].values())
    assert outcome.probe_steps > 0  # the tool ran through the probe, and it was counted


@pytest.mark.parametrize("name", MODULES)
def test_clear_fault_is_named_by_its_symptom(digits_grid, name: str) -> None:
    fault, symptom = CLEAR_FAULT[name]
    outcome = _diagnose(name, _run(digits_grid, fault))
    assert (outcome.label, outcome.evidence["decided_by"]) == (fault, symptom)
    assert outcome.evidence["present"][symptom] is True


@pytest.mark.parametrize("name", MODULES)
def test_symptom_table_maps_to_known_labels(name: str) -> None:
    known = {"unknown", _tools.OTHER_FAULT, *condition_names()}
    symptoms = MODULES[name].SYMPTOMS
    assert {s.label for s in symptoms} <= known
    assert len({s.name for s in symptoms}) == len(symptoms)


@pytest.mark.parametrize("name", MODULES)
def test_docs_show_each_symptom_table(name: str) -> None:
    docs = (ROOT / "docs" / "tools.md").read_text()
    assert _tools.symptom_table(MODULES[name].SYMPTOMS) in docs


@pytest.mark.parametrize("name", MODULES)
def test_conformance_checks_pass(name: str) -> None:
    failed = [r for r in run_checks(name) if not r.passed]
    assert not failed, failed


# -- the replay is the monitored loop --------------------------------------------------


def _independent_replay(fault: str, seed: int = 0) -> tuple[torch.nn.Module, list[float]]:
    """The loop of faultbench.training.loop, written out again from the setup itself."""
    setup = condition(fault).apply(base_setup(get_task("digits"), seed))
    model = build_model(setup)
    optimizer = torch.optim.Adam(model.parameters(), lr=setup.lr)
    stream = iter(BatchStream(setup.X_train, setup.y_train, batch_size=setup.batch_size, seed=seed))
    losses = []
    with _tools.one_thread():  # as the runner trains
        for _ in range(setup.steps):
            xb, yb = next(stream)
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    return model, losses


@pytest.mark.parametrize("fault", ["healthy", "lr_too_high", "huge_inputs", "softmax_before_loss"])
def test_replay_reproduces_faults_the_probe_carries(digits_grid, fault: str) -> None:
    run = _run(digits_grid, fault)
    replayed = _tools.replay(run)
    np.testing.assert_allclose(replayed.losses, run.trace.loss, rtol=1e-4, atol=1e-5)
    assert run.probe is not None and run.probe.steps_used == run.config.steps


def test_replay_of_a_loop_bug_trains_as_healthy(digits_grid) -> None:
    # The probe does not carry the loop's missing zero_grad: the adapters see a healthy run.
    run = _run(digits_grid, "missing_zero_grad")
    replayed = _tools.replay(run)
    np.testing.assert_allclose(replayed.losses, digits_grid[("healthy", 0)].trace.loss, rtol=1e-4)
    assert not np.allclose(replayed.losses, run.trace.loss, rtol=1e-2)


def test_weightwatcher_growth_matches_torch_spectral_norms(digits_grid) -> None:
    outcome = _diagnose("weightwatcher", _run(digits_grid, "lr_too_high"))
    final, _ = _independent_replay("lr_too_high")
    setup = condition("lr_too_high").apply(base_setup(get_task("digits"), 0))
    initial = build_model(setup)
    for layer in ("hidden", "output"):
        # The tool's spectral norm is the top eigenvalue of W^T W: the top singular value squared.
        top = [
            torch.linalg.matrix_norm(getattr(m, layer).weight.detach(), ord=2)
            for m in (final, initial)
        ]
        expected = float(top[0] / top[1]) ** 2
        reported = outcome.evidence["numbers"]["spectral_norm_growth"][layer]
        assert reported == pytest.approx(expected, rel=1e-3)


def test_cockpit_first_loss_and_gradient_match_the_run(digits_grid) -> None:
    run = _run(digits_grid, "huge_inputs")
    numbers = _diagnose("cockpit", run).evidence["numbers"]
    assert numbers["start_loss"] == pytest.approx(float(run.trace.loss[0]), rel=1e-5)
    setup = condition("huge_inputs").apply(base_setup(get_task("digits"), 0))
    model = build_model(setup)
    xb, yb = next(iter(BatchStream(setup.X_train, setup.y_train, batch_size=32, seed=0)))
    F.cross_entropy(model(xb), yb).backward()
    norm = float(torch.sqrt(sum((p.grad**2).sum() for p in model.parameters())))
    assert numbers["start_grad_norm"] == pytest.approx(norm, rel=1e-4)
    assert numbers["tracked_steps"] == len(range(0, run.config.steps, cockpit_tool.TRACK_EVERY))


def test_lr_range_first_loss_is_the_first_seeded_batch(digits_grid) -> None:
    run = _run(digits_grid, "huge_inputs")
    numbers = _diagnose("lr-range", run).evidence["numbers"]
    setup = condition("huge_inputs").apply(base_setup(get_task("digits"), 0))
    X, y = torch.from_numpy(setup.X_train), torch.from_numpy(setup.y_train)
    # A shuffling DataLoader draws its workers' base seed from the generator, then the order.
    generator = torch.Generator().manual_seed(0)
    torch.empty((), dtype=torch.int64).random_(generator=generator)
    order = torch.randperm(len(y), generator=generator)[:32]
    with torch.no_grad():
        first = float(F.cross_entropy(build_model(setup)(X[order]), y[order]))
    assert numbers["first_loss"] == pytest.approx(first, rel=1e-5)
    assert numbers["run_lr_over_suggestion"] == pytest.approx(
        run.config.lr / numbers["suggested_lr"]
    )


# -- without the extra -----------------------------------------------------------------


def _blocked(tmp_path: Path, module: str) -> dict[str, str]:
    blocker = tmp_path / "block"
    blocker.mkdir(exist_ok=True)
    (blocker / f"{module}.py").write_text("raise ImportError('blocked for the test')\n")
    return {**os.environ, "PYTHONPATH": str(blocker), "FAULTBENCH_STORE": str(tmp_path / "s")}


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultbench", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.mark.parametrize("name", MODULES)
def test_without_the_tool_list_says_how_to_install(tmp_path: Path, name: str) -> None:
    shown = _cli("list", env=_blocked(tmp_path, TOOL_MODULE[name]))
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.strip().startswith(name + " "))
    assert "unavailable: pip install 'faultbench[tools]'" in line
    others = [n for n in MODULES if n != name]
    assert all("unavailable" not in _line(shown.stdout, n) for n in others)


def _line(listing: str, name: str) -> str:
    return next(x for x in listing.splitlines() if x.strip().startswith(name + " "))


@pytest.mark.parametrize(("name", "module"), [*TOOL_MODULE.items(), ("cockpit", "pkg_resources")])
def test_without_the_tool_run_is_one_line_exit_2(tmp_path: Path, name: str, module: str) -> None:
    # pkg_resources: what cockpit meets with setuptools 81 or later.
    shown = _cli(
        "run",
        "--grid",
        "classic",
        "--diagnoser",
        name,
        "--task",
        "digits",
        env=_blocked(tmp_path, module),
    )
    assert shown.returncode == 2
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 1, shown.stderr
    assert f"diagnoser '{name}' is unavailable: pip install 'faultbench[tools]'" in lines[0]
    assert not list((tmp_path / "s").glob("**/*.json"))  # nothing trained


# -- end to end ------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODULES)
def test_cli_run_end_to_end(digits_grid, shared_store_root: Path, name: str) -> None:
    # Two faults and healthy: a tool's probe takes seconds a run.
    shown = _cli(
        "run", "--grid", "classic", "--diagnoser", name, "--task", "digits", "--seeds", "1",
        "--faults", "lr_too_high,dead_units", "--json", "--store", str(shared_store_root),
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert (report["diagnoser"], report["tuned"], report["total"]) == (name, True, 3)
    assert report["failures"] == {} and report["trained"] == 0
    assert report["mean_probe_steps"] > 0
    assert report["correct"] == sum(r["predicted"] == r["condition"] for r in report["runs"])


def test_cockpit_abstains_on_a_model_backpack_cannot_instrument(digits_grid) -> None:
    # BackPACK has no individual gradients for a GRU: Cockpit cannot run, so it says unknown.
    def make_model() -> nn.Module:
        torch.manual_seed(0)
        return build(Network("gru", widths=(16,)), n_features=12, n_outputs=5, image_side=0)

    X = torch.randint(0, 5, (64, 12)).float()
    y = torch.randint(0, 5, (64,))
    healthy = _run(digits_grid, "healthy")
    run = Run(
        "user", 0, healthy.trace, healthy.config, Probe.from_user(make_model, F.cross_entropy, X, y)
    )
    outcome = _diagnose("cockpit", run)
    assert (outcome.label, outcome.evidence["decided_by"]) == (
        "unknown",
        "cockpit cannot instrument this model",
    )
    assert outcome.evidence["no_batch_grad"] == [
        "rnn.gru.weight_ih_l0", "rnn.gru.weight_hh_l0", "rnn.gru.bias_ih_l0", "rnn.gru.bias_hh_l0"
    ]  # fmt: skip
    assert outcome.probe_steps == 1
