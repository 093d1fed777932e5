"""The Monitor on a user's own loop of every kind: what it records equals an independent
computation (scikit-learn's metrics, numpy), and a shape it cannot read records nothing and
says so once."""

from __future__ import annotations

import functools
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import accuracy_score, f1_score, r2_score
from torch import nn

from faultbench import FaultbenchError, Monitor, Probe
from faultbench.faults.fault import labels
from faultbench.scoring.budget import calibration
from faultbench.tasks.kinds import KINDS, direction
from faultbench.tools.doctor import UNDECIDED, doctor
from faultbench.training.monitor import MonitorWarning

STEPS = 12
BATCH = 32


@dataclass(frozen=True)
class Loop:
    """A user's loop of one kind: the data, the model, the loss and the step score as
    scikit-learn computes it from the same outputs and targets."""

    X: torch.Tensor
    y: torch.Tensor
    model: Callable[[], nn.Module]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    reference: Callable[[np.ndarray, np.ndarray], float]  # (output, target) -> score


def _loops() -> dict[str, Loop]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(BATCH * STEPS, 6, generator=g)
    w = torch.randn(6, 3, generator=g)
    signal = X @ w

    def mlp(out: int) -> Callable[[], nn.Module]:
        return lambda: nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, out))

    tokens = torch.randint(0, 7, (BATCH * STEPS, 5), generator=g)
    labels = torch.where(torch.rand(tokens.shape, generator=g) < 0.3, -100, tokens)
    return {
        "multiclass": Loop(
            X,
            signal.argmax(1),
            mlp(3),
            F.cross_entropy,
            lambda o, y: accuracy_score(y, o.argmax(1)),
        ),
        "binary": Loop(
            X,
            (signal[:, :1] > 0).float(),
            mlp(1),
            F.binary_cross_entropy_with_logits,
            lambda o, y: accuracy_score(y.ravel() > 0.5, o.ravel() > 0),
        ),
        "multilabel": Loop(
            X,
            (signal > 0).float(),
            mlp(3),
            F.binary_cross_entropy_with_logits,
            lambda o, y: f1_score(y > 0.5, o > 0, average="micro", zero_division=1.0),
        ),
        "regression": Loop(
            X,
            signal[:, :2] + 0.1 * torch.randn(len(X), 2, generator=g),
            mlp(2),
            F.mse_loss,
            lambda o, y: r2_score(y, o, multioutput="variance_weighted"),
        ),
        "reconstruction": Loop(
            X,
            X,
            lambda: nn.Sequential(nn.Linear(6, 3), nn.ReLU(), nn.Linear(3, 6)),
            F.mse_loss,
            lambda o, y: r2_score(y, o, multioutput="variance_weighted"),
        ),
        "next_token": Loop(
            tokens,
            labels,
            lambda: nn.Sequential(nn.Embedding(7, 8), nn.Linear(8, 7)),
            lambda o, y: F.cross_entropy(o.reshape(-1, 7), y.reshape(-1)),
            lambda o, y: accuracy_score(y[y != -100], o.argmax(-1)[y != -100]),
        ),
    }


LOOPS = _loops()


def _train(loop: Loop, kind: str | None) -> tuple[Monitor, list[float]]:
    """The user's loop under a Monitor; the scikit-learn score of each step's batch."""
    torch.manual_seed(0)
    model = loop.model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = Monitor(model, optimizer, every=1, kind=kind)
    expected = []
    batches = zip(loop.X.split(BATCH), loop.y.split(BATCH), strict=True)
    for xb, yb in monitor.batches(batches):
        out = model(xb)
        loss = loop.loss(out, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(loss, out, yb)
        expected.append(loop.reference(out.detach().numpy(), yb.numpy()))
    return monitor, expected


def test_every_kind_has_a_loop_here() -> None:
    assert set(LOOPS) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_step_score_equals_scikit_learns(kind: str) -> None:
    monitor, expected = _train(LOOPS[kind], kind)
    trace, config = monitor.trace(), monitor.config()
    # scikit-learn sums float32 outputs in float32, the Monitor in float64
    np.testing.assert_allclose(trace.batch_acc, expected, rtol=1e-5, atol=1e-6)
    assert config.kind == kind and config.score == KINDS[kind].score
    assert monitor.notes == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_chance_and_loss_reference_follow_the_targets(kind: str) -> None:
    loop = LOOPS[kind]
    monitor, _ = _train(loop, kind)
    config = monitor.config()
    y = loop.y.numpy()
    if kind in ("multiclass", "binary"):
        values = y.ravel().astype(np.int64)
        assert config.chance == pytest.approx(np.bincount(values).max() / len(values))
    elif kind == "multilabel":
        p = y.mean()
        assert config.chance == pytest.approx(2 * p / (1 + p))
    else:
        assert config.chance == 0.0
    outputs = {"multiclass": 3, "next_token": 7}
    if kind in outputs:
        assert config.loss_reference == pytest.approx(math.log(outputs[kind]))
    elif kind in ("binary", "multilabel"):
        assert config.loss_reference == pytest.approx(math.log(2))
    else:  # a squared error starts near the targets' variance (per column, averaged)
        assert config.loss_reference == pytest.approx(y.var(axis=0).mean(), rel=1e-5)


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"next_token"}))
def test_without_a_kind_the_steps_say_it_and_score_as_declared(kind: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", MonitorWarning)  # nothing to warn of
        inferred, expected = _train(LOOPS[kind], None)
    declared, _ = _train(LOOPS[kind], kind)
    reading = inferred.kind_reading
    assert reading.kind == KINDS[kind] and not reading.declared
    np.testing.assert_array_equal(inferred.trace().batch_acc, declared.trace().batch_acc)
    np.testing.assert_allclose(inferred.trace().batch_acc, expected, rtol=1e-5, atol=1e-6)
    assert inferred.config() == declared.config()


def test_a_single_logit_binary_run_is_not_read_as_one_class() -> None:
    """The bug an earlier issue reported: (N, 1) logits and float (N, 1) targets were read as
    one class, a training accuracy of 1.0 whatever the model did; they are one logit against
    0/1 targets, a binary task's."""
    loop = LOOPS["binary"]
    monitor, expected = _train(loop, None)
    assert monitor.config().kind == "binary"
    assert monitor.trace().batch_acc.tolist() == pytest.approx(expected)
    assert min(expected) < 1.0  # the truth is not 1.0


@pytest.mark.parametrize(
    ("kind", "output", "target"),
    [
        ("binary", torch.zeros(8, 1), torch.zeros(4, 1)),
        ("multilabel", torch.zeros(8, 3), torch.zeros(8, 2)),
        ("regression", torch.zeros(8, 2), torch.zeros(8, 3)),
        ("multiclass", torch.zeros(8, 3), torch.zeros(8, 2, dtype=torch.long)),
    ],
)
def test_a_shape_the_kind_cannot_read_records_nothing_and_says_why(
    kind: str, output: torch.Tensor, target: torch.Tensor
) -> None:
    model = nn.Linear(2, 2)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), kind=kind)
    with pytest.warns(MonitorWarning, match=f"a {kind} output of shape"):
        monitor.step(0.5, output, target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monitor.step(0.5, output, target)  # said once
    assert np.isnan(monitor.trace().batch_acc).all()


def test_log_eval_takes_any_named_metric_and_the_kinds_score_is_the_task_score() -> None:
    model = nn.Linear(2, 1)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), kind="regression")
    monitor.step(1.0)
    monitor.log_eval(train_r2=0.5, val_r2=0.4, val_mae=0.9, val_loss=1.2)
    monitor.step(0.5)
    monitor.log_eval(val_r2=0.7, val_bleu=3.0)
    trace = monitor.trace()
    assert trace.val_acc.tolist() == [0.4, 0.7]
    assert trace.train_acc[0] == 0.5 and math.isnan(trace.train_acc[1])
    assert trace.metrics["val_mae"][0] == 0.9 and math.isnan(trace.metrics["val_mae"][1])
    assert trace.val_loss[0] == 1.2
    assert direction("val_mae") == "lower" and direction("train_r2") == "higher"
    assert direction("val_bleu") == ""  # kept, but no check reads a metric it cannot orient
    with pytest.raises(FaultbenchError, match="expected a metric named <split>_<metric>"):
        monitor.log_eval(r2=0.1)


def test_legacy_accuracies_are_the_task_score() -> None:
    model = nn.Linear(2, 3)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1))
    monitor.step(1.0)
    monitor.log_eval(train_acc=0.9, val_acc=0.8)
    trace = monitor.trace()
    assert trace.train_acc.tolist() == [0.9] and trace.val_acc.tolist() == [0.8]
    assert trace.metrics == {"train_accuracy": [0.9], "val_accuracy": [0.8]}


# -- the probe for any model -----------------------------------------------------------


class TwoInputs(nn.Module):
    """A user's model of two inputs: categorical codes and numeric features."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.body = nn.Sequential(nn.Linear(4 + 3, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, codes: torch.Tensor, numbers: torch.Tensor) -> torch.Tensor:
        return self.body(torch.cat([self.embed(codes), numbers], dim=1))


def _two_input_run() -> tuple[Monitor, Probe]:
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 5, (256,), generator=g)
    numbers = torch.randn(256, 3, generator=g)
    y = (numbers[:, :1] * 2 + codes[:, None].float() / 5) + 0.1 * torch.randn(256, 1, generator=g)
    torch.manual_seed(0)
    model = TwoInputs()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = Monitor(model, optimizer, every=5, kind="regression")
    for epoch in range(8):
        for i in range(0, 256, 32):
            out = model(codes[i : i + 32], numbers[i : i + 32])
            loss = F.mse_loss(out, y[i : i + 32])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(loss, out, y[i : i + 32])
        with torch.no_grad():
            r2 = r2_score(y.numpy(), model(codes, numbers).numpy())
        monitor.log_eval(train_r2=r2, val_r2=r2, step=monitor.config().steps)
        del epoch

    def fresh() -> nn.Module:
        torch.manual_seed(0)
        return TwoInputs()

    return monitor, Probe.from_user(fresh, F.mse_loss, (codes[:64], numbers[:64]), y[:64])


def test_a_two_input_model_is_probed_and_the_doctor_answers() -> None:
    monitor, probe = _two_input_run()
    X, y = probe.train_data(16)
    assert isinstance(X, tuple) and len(X) == 2 and len(X[0]) == len(X[1]) == len(y) == 16
    report = doctor(monitor, "rules", probe=probe)
    assert report.headline in labels(), str(report)  # an answer, not a crash or "undecided"
    checks = {c.name: c.verdict for c in report.checks}
    assert checks["memorizes a small batch"] == "pass"  # through model(codes, numbers)
    # R² against a chance of 0, not 1.0; silent where no tuned-on task is a regression's
    calibrated = calibration("val_at_chance", "regression") is not None
    assert checks["validation improves"] == (
        "pass" if calibrated else "not measured: not calibrated"
    )
    assert probe.steps_used > 0


def test_a_multi_output_model_is_probed_and_the_doctor_answers() -> None:
    loop = LOOPS["regression"]
    monitor, _ = _train(loop, "regression")
    monitor.log_eval(train_r2=0.9, val_r2=0.85)
    probe = Probe.from_user(loop.model, F.mse_loss, loop.X[:64], loop.y[:64])
    report = doctor(monitor, "rules", probe=probe)
    assert report.headline in labels(), str(report)
    assert {c.name: c.verdict for c in report.checks}["memorizes a small batch"] == "pass"


def test_a_tuple_whose_inputs_differ_in_length_is_refused_naming_the_input() -> None:
    with pytest.raises(FaultbenchError, match=r"X\[1\] has 3 examples but y has 4"):
        Probe.from_user(
            TwoInputs,
            F.mse_loss,
            (torch.zeros(4, dtype=torch.long), torch.zeros(3, 3)),
            torch.zeros(4, 1),
        )


# -- the README's loop of every kind, run as the pages write it ------------------------

REPO = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/monitor.md")  # both show the loop and the table of kinds
TABLE = re.compile(r"<!-- monitor-kinds:start -->\n(.*?)\n<!-- monitor-kinds:end -->", re.S)
LOOP = re.compile(r"```python\n(from faultbench import Monitor, doctor\n.*?)```", re.S)
#: The loop's lines a kind's row replaces: the Monitor, the step and the evaluation.
SHOWN = {
    "monitor": "Monitor(model, optimizer)",
    "step": "monitor.step(loss, out, yb)",
    "log_eval": "monitor.log_eval(train_acc=train_score, val_acc=val_score, val_loss=val_loss)",
}


def _table(page: str) -> dict[str, dict[str, str]]:
    """Each kind's row of the page's table: its Monitor call, step and log_eval lines."""
    found = TABLE.search((REPO / page).read_text())
    assert found, f"{page} has no table of kinds"
    rows = {}
    for line in found.group(1).splitlines()[2:]:
        kind, *cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        code = [span for cell in cells for span in re.findall(r"`([^`]*)`", cell)]
        rows[kind] = {
            "monitor": next(c for c in code if c.startswith("Monitor(")),
            "step": next(c for c in code if c.startswith("monitor.step(")),
            "log_eval": next(c for c in code if c.startswith("monitor.log_eval(")),
        }
    return rows


def _loop(page: str, row: dict[str, str]) -> str:
    """The page's loop with a kind's row in place of its three lines (each there once)."""
    found = LOOP.search((REPO / page).read_text())
    assert found, f"{page} has no Monitor loop"
    code = found.group(1)
    for part, shown in SHOWN.items():
        assert code.count(shown) == 1, f"{page}'s loop no longer shows {shown}"
        code = code.replace(shown, row[part])
    return code


@dataclass(frozen=True)
class Data:
    """A healthy training set of one kind: the arrays, the model, its loss and how long."""

    kind: str
    X: np.ndarray
    y: np.ndarray
    model: Callable[[], nn.Module]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    epochs: int


def _mlp(width_in: int, width_out: int, hidden: int = 32) -> Callable[[], nn.Module]:
    return lambda: nn.Sequential(
        nn.Linear(width_in, hidden), nn.ReLU(), nn.Linear(hidden, width_out)
    )


def _standard(a: np.ndarray) -> np.ndarray:
    return ((a - a.mean(axis=0)) / (a.std(axis=0) + 1e-8)).astype(np.float32)


def _datasets() -> dict[str, Data]:
    from sklearn.datasets import (  # bundled with scikit-learn or generated: no download
        load_breast_cancer,
        load_diabetes,
        load_digits,
        make_multilabel_classification,
    )

    rng = np.random.default_rng(0)
    digits, cancer, diabetes = load_digits(), load_breast_cancer(), load_diabetes()
    labels_X, labels_y = make_multilabel_classification(
        n_samples=1000, n_features=20, n_classes=5, random_state=0
    )
    many_X = rng.normal(size=(1200, 10))
    many_y = np.tanh(many_X @ rng.normal(size=(10, 8)) / 2) + 0.05 * rng.normal(size=(1200, 8))
    codes = rng.normal(size=(1200, 4))  # an autoencoder's data: 16 features of 4 factors
    coded = codes @ rng.normal(size=(4, 16)) + 0.05 * rng.normal(size=(1200, 16))
    tokens = rng.integers(0, 12, size=(600, 8))
    return {
        "multiclass": Data(
            "multiclass", _standard(digits.data), digits.target, _mlp(64, 10), F.cross_entropy, 8
        ),
        "binary": Data(
            "binary",
            _standard(cancer.data),
            cancer.target[:, None].astype(np.float32),
            _mlp(30, 1),
            F.binary_cross_entropy_with_logits,
            8,
        ),
        "multilabel": Data(
            "multilabel",
            _standard(labels_X),
            labels_y.astype(np.float32),
            _mlp(20, 5),
            F.binary_cross_entropy_with_logits,
            10,
        ),
        "regression": Data(
            "regression",
            _standard(diabetes.data),
            _standard(diabetes.target[:, None]),
            _mlp(10, 1),
            nn.MSELoss(),
            15,
        ),
        "regression of 8 targets": Data(
            "regression", _standard(many_X), many_y.astype(np.float32), _mlp(10, 8), F.mse_loss, 10
        ),
        "reconstruction": Data(
            "reconstruction",
            _standard(coded),
            _standard(coded),
            lambda: nn.Sequential(
                nn.Linear(16, 32),
                nn.ReLU(),
                nn.Linear(32, 4),
                nn.Linear(4, 32),
                nn.ReLU(),
                nn.Linear(32, 16),
            ),
            F.mse_loss,
            15,
        ),
        "next_token": Data(
            "next_token",
            tokens,
            (tokens + 1) % 12,  # each token's successor: learnable position by position
            lambda: nn.Sequential(nn.Embedding(12, 16), nn.Linear(16, 12)),
            lambda out, y: F.cross_entropy(out.reshape(-1, 12), y.reshape(-1)),
            6,
        ),
    }


DATA = _datasets()


def _scores(data: Data, out: np.ndarray, y: np.ndarray) -> float:
    """The kind's score as scikit-learn (or, for answers, numpy) computes it."""
    if data.kind == "multiclass":
        return float(accuracy_score(y, out.argmax(1)))
    if data.kind == "binary":
        return float(accuracy_score(y.ravel() > 0.5, out.ravel() > 0))
    if data.kind == "multilabel":
        return float(f1_score(y > 0.5, out > 0, average="micro"))
    if data.kind == "next_token":
        return float((out.argmax(-1) == y).all(axis=1).mean())
    return float(r2_score(y, out, multioutput="variance_weighted"))


@functools.cache  # each loop trains once for the tests that read it
def _run_the_page(page: str, name: str, *, probe: bool = False) -> tuple[Monitor, Any, list]:
    """The page's loop with the row of ``name``'s kind, run on its data as written."""
    data = DATA[name]
    torch.manual_seed(0)
    n = int(0.8 * len(data.X))
    X, y = torch.tensor(data.X), torch.tensor(data.y)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X[:n], y[:n]),
        batch_size=32,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    model = data.model()
    logged: list[tuple[float, float]] = []

    def evaluate(model: nn.Module) -> tuple[float, float, float]:
        with torch.no_grad():
            train_out, val_out = model(X[:n]), model(X[n:])
        scores = (
            _scores(data, train_out.numpy(), y[:n].numpy()),
            _scores(data, val_out.numpy(), y[n:].numpy()),
        )
        logged.append(scores)
        return (*scores, float(data.loss(val_out, y[n:])))

    printed: list[Any] = []
    namespace: dict[str, Any] = {
        "model": model,
        "optimizer": torch.optim.Adam(model.parameters(), lr=3e-3),
        "loader": loader,
        "loss_fn": data.loss,
        "epochs": data.epochs,
        "evaluate": evaluate,
        "print": printed.append,
    }
    code = _loop(page, _table(page)[data.kind])
    if probe:
        code = code.replace(
            "probe=None", "probe=Probe.from_user(make_model, loss_fn, X[:n], y[:n])"
        )
        namespace.update(Probe=Probe, make_model=data.model, X=X, y=y, n=n)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MonitorWarning)  # the loop as written needs no warning
        exec(
            compile(code, f"{page}'s loop", "exec"), namespace
        )  # the page's own code, run as written
    (report,) = printed
    return namespace["monitor"], report, logged


def test_the_readme_and_the_monitor_page_show_the_same_kinds() -> None:
    readme, docs = (_table(page) for page in PAGES)
    assert readme == docs
    assert set(readme) == set(KINDS)
    assert _loop(*PAGES[:1], readme["regression"]) == _loop(PAGES[1], docs["regression"])


@pytest.mark.parametrize("name", sorted(DATA))
def test_each_kind_as_the_page_writes_it_is_read_and_healthy(name: str) -> None:
    """The README's loop with each kind's row (the monitor page's are the same, above)."""
    monitor, report, logged = _run_the_page(PAGES[0], name)
    kind = DATA[name].kind
    assert report.headline == "healthy", str(report)
    if kind == "next_token":  # declared: class-index targets would read as classes
        assert report.kind == "next_token (declared)"
    else:
        assert report.kind.startswith(f"{kind}, inferred from "), report.kind
        assert f"kind: {kind}, inferred from " in str(report)
    trace = monitor.trace()
    assert trace.val_acc.tolist() == pytest.approx([val for _, val in logged])
    assert trace.train_acc.tolist() == pytest.approx([train for train, _ in logged])
    assert np.isfinite(trace.batch_acc).all() and monitor.config().kind == kind
    assert logged[-1][1] > logged[0][1]  # healthy in truth: the validation score rose


@pytest.mark.parametrize("name", ["regression", "regression of 8 targets", "reconstruction"])
def test_the_probe_agrees_the_runs_of_other_kinds_are_healthy(name: str) -> None:
    _, report, _ = _run_the_page(PAGES[0], name, probe=True)
    assert report.headline == "healthy", str(report)
    assert {c.name: c.verdict for c in report.checks}["memorizes a small batch"] == "pass"


def test_the_inferred_kind_is_named_with_what_said_it() -> None:
    _, report, _ = _run_the_page(PAGES[0], "regression")
    assert report.kind == (
        "regression, inferred from the float targets of an MSE loss (if it is not, state it: "
        'Monitor(model, optimizer, kind="..."))'
    )
    _, report, _ = _run_the_page(PAGES[0], "reconstruction")
    assert "that are the batch's inputs" in report.kind
    _, report, _ = _run_the_page(PAGES[0], "multilabel")
    assert report.kind.startswith("multilabel, inferred from the targets of a BCE-with-logits")


# -- where nothing given says the kind, and what the loss says -------------------------


def _regression_by_hand(
    *, give_step: Callable[[Monitor, torch.Tensor, torch.Tensor, torch.Tensor], None], **logged: str
) -> Monitor:
    """A diabetes regression whose loop chooses what ``step`` gets and names its metrics."""
    data = DATA["regression"]
    X, y = torch.tensor(data.X), torch.tensor(data.y)
    torch.manual_seed(0)
    model = data.model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    monitor = Monitor(model, optimizer)
    for epoch in range(4):
        for xb, yb in monitor.batches(zip(X.split(32), y.split(32), strict=True)):
            out = model(xb)
            loss = F.mse_loss(out, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            give_step(monitor, loss, out, yb)
        with torch.no_grad():
            r2 = r2_score(y.numpy(), model(X).numpy())
            mse = float(F.mse_loss(model(X), y))
        values = {"r2": r2, "loss": mse}
        monitor.log_eval(**{name: values[metric] for name, metric in logged.items()})
        del epoch
    return monitor


def test_where_nothing_says_the_kind_the_doctor_names_the_argument_to_add() -> None:
    monitor = _regression_by_hand(
        give_step=lambda m, loss, out, yb: m.step(loss), val_loss="loss", train_loss="loss"
    )
    report = doctor(monitor, "rules")
    assert report.headline == UNDECIDED
    assert report.reason.startswith(
        "no score was recorded though log_eval logged val_loss, train_loss; the run's kind "
        'cannot be told from them: add Monitor(model, optimizer, kind="regression")'
    ), report.reason
    assert "neither monitor.log_eval" not in report.reason  # something was logged
    assert report.kind.startswith(
        "unknown (monitor.step got no output and target; log_eval logged val_loss, train_loss, "
        'none of them a kind\'s own metric): add Monitor(model, optimizer, kind="regression")'
    ), report.kind
    assert f"kind: {report.kind}" in str(report)
    assert all(f'kind="{kind}"' in report.kind for kind in KINDS)  # and every other to choose


def test_a_step_no_kind_reads_is_said_with_the_argument_to_add() -> None:
    def misshapen(m: Monitor, loss: torch.Tensor, out: torch.Tensor, yb: torch.Tensor) -> None:
        m.step(loss, torch.cat([out, out], dim=1), yb)  # two outputs per target: no kind

    with pytest.warns(MonitorWarning, match=r'Pass Monitor\(model, optimizer, kind="regression"\)'):
        monitor = _regression_by_hand(give_step=misshapen, val_loss="loss")
    report = doctor(monitor, "rules")
    assert report.headline == UNDECIDED
    assert "monitor.step's output and target could not be read" in report.reason
    assert 'add Monitor(model, optimizer, kind="regression")' in report.reason
    assert "log_eval logged val_loss" in report.reason


def test_metric_names_say_the_kind_when_the_steps_do_not() -> None:
    monitor = _regression_by_hand(
        give_step=lambda m, loss, out, yb: m.step(loss), train_r2="r2", val_r2="r2"
    )
    reading = monitor.kind_reading
    assert reading.kind == KINDS["regression"]
    assert reading.source == "the metrics logged: train_r2, val_r2"
    trace, config = monitor.trace(), monitor.config()
    assert np.isfinite(trace.val_acc).all()
    np.testing.assert_array_equal(trace.val_acc, trace.metrics["val_r2"])
    assert config.kind == "regression" and config.chance == 0.0  # R²'s chance needs no targets
    assert doctor(monitor, "rules").headline != UNDECIDED


def test_a_logged_score_other_than_the_kinds_is_named_and_so_is_the_one_to_log() -> None:
    model = nn.Linear(3, 1)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), kind="binary")
    monitor.step(0.7)
    monitor.log_eval(val_f1=0.4, val_loss=0.7)
    monitor.step(0.6)
    monitor.log_eval(val_f1=0.5, val_loss=0.6)
    report = doctor(monitor, "rules")
    assert report.headline == UNDECIDED and report.kind == "binary (declared)"
    assert report.reason.startswith(
        "no score was recorded though log_eval logged val_f1, val_loss; none is the score of "
        "a binary run: log val_accuracy (and train_accuracy)"
    ), report.reason


def _one_step(
    loss_fn: Callable[..., torch.Tensor | float], out: torch.Tensor, y: torch.Tensor, **kw: Any
) -> Monitor:
    model = nn.Linear(2, 2)
    monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), **kw)
    loss = loss_fn(out, y)
    monitor.step(loss, out, y)
    return monitor


ZERO_ONE = torch.tensor([[0.0], [1.0], [1.0], [0.0], [1.0], [1.0]])
LOGITS = torch.tensor([[-2.0], [0.5], [-0.1], [-0.3], [3.0], [1.0]], requires_grad=True)


@pytest.mark.parametrize(
    ("loss_fn", "said"),
    [
        (F.mse_loss, "an MSE loss"),
        (nn.MSELoss(), "an MSE loss"),
        (F.l1_loss, "an L1 loss"),
        (F.huber_loss, "a Huber loss"),
        (F.smooth_l1_loss, "a SmoothL1 loss"),
        (lambda o, y: 0.5 * ((o - y) ** 2).mean() + 0.0 * o.sum(), "a squared error"),
    ],
)
def test_the_loss_says_a_regression_even_of_zero_one_values(
    loss_fn: Callable[..., torch.Tensor], said: str
) -> None:
    reading = _one_step(loss_fn, LOGITS, ZERO_ONE).kind_reading
    assert reading.kind == KINDS["regression"]
    assert reading.source == f"the float targets of {said}"


def test_zero_one_targets_of_an_unread_loss_against_one_logit_are_binary() -> None:
    monitor = _one_step(
        lambda o, y: F.binary_cross_entropy_with_logits(o, y).detach().item(), LOGITS, ZERO_ONE
    )
    assert monitor.kind_reading.kind == KINDS["binary"]
    assert monitor.kind_reading.source == "0/1 targets against one output per example"
    expected = accuracy_score(ZERO_ONE.numpy().ravel() > 0.5, LOGITS.detach().numpy().ravel() > 0)
    assert monitor.trace().batch_acc.tolist() == [pytest.approx(expected)]


def test_a_sigmoids_output_to_a_bce_loss_is_read_at_one_half() -> None:
    probabilities = torch.sigmoid(LOGITS)
    monitor = _one_step(F.binary_cross_entropy, probabilities, ZERO_ONE)
    assert monitor.kind_reading.kind == KINDS["binary"]
    expected = accuracy_score(
        ZERO_ONE.numpy().ravel() > 0.5, probabilities.detach().numpy().ravel() > 0.5
    )
    assert monitor.trace().batch_acc.tolist() == [pytest.approx(expected)]
    assert expected < 1.0 and expected != ZERO_ONE.mean()  # neither all right nor all "yes"


def test_soft_label_targets_of_a_logits_loss_are_multilabel() -> None:
    soft = torch.tensor([[0.9, 0.1, 0.2], [0.2, 0.8, 0.7]])
    out = torch.tensor([[1.0, -1.0, 0.5], [-0.3, 2.0, 0.1]], requires_grad=True)
    reading = _one_step(F.binary_cross_entropy_with_logits, out, soft).kind_reading
    assert reading.kind == KINDS["multilabel"]


def test_a_declared_kind_wins_over_what_the_steps_say() -> None:
    monitor = _one_step(F.binary_cross_entropy_with_logits, LOGITS, ZERO_ONE, kind="regression")
    assert monitor.kind_reading.kind == KINDS["regression"] and monitor.kind_reading.declared
    r2 = r2_score(ZERO_ONE.numpy(), LOGITS.detach().numpy())
    assert monitor.trace().batch_acc.tolist() == [pytest.approx(r2)]


def test_targets_that_equal_the_inputs_are_a_reconstruction_only_where_they_are() -> None:
    X = torch.randn(8, 4)
    model = nn.Linear(4, 4)
    for target, kind in ((X.clone(), "reconstruction"), (X + 1.0, "regression")):
        monitor = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1))
        for xb, _ in monitor.batches([(X, target)]):
            out = model(xb)
            monitor.step(F.mse_loss(out, target), out, target)
        assert monitor.config().kind == kind
