"""A user's own training script, with a faultbench Monitor added in three lines.

Nothing here comes from the benchmark except the Monitor and the doctor: the
model, the data pipeline and the loop are this script's own. ``--fault`` breaks
the script the way a real bug would (a forgotten normalization, a slow
``Dataset``, a missing ``zero_grad``...), so you can see what the doctor says.

    python examples/train_with_monitor.py --fault huge_inputs
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from faultbench import Monitor, Probe, doctor

FAULTS = (
    "none",
    "huge_inputs",
    "starved_loader",
    "missing_zero_grad",
    "lr_too_high",
    "too_small_model",
    "label_mismatch",
    "softmax_before_loss",
    "frozen_layer",
)


class SlowDigits(Dataset):
    """A dataset that "decodes" every example on access, as an image loader would."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor, seconds: float) -> None:
        self.X, self.y, self.seconds = X, y, seconds

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.seconds)  # the bug: decoding per item, on the training thread
        return self.X[i], self.y[i]


def load(fault: str) -> tuple[torch.Tensor, ...]:
    """Digits, split and scaled (or, with ``huge_inputs``, scaled the wrong way)."""
    X, y = load_digits(return_X_y=True)
    X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    if fault == "huge_inputs":
        # The bug: pixels "converted to 8-bit" instead of standardized.
        X_tr, X_va = X_tr * 255.0, X_va * 255.0
    else:
        scaler = StandardScaler().fit(X_tr)
        X_tr, X_va = scaler.transform(X_tr), scaler.transform(X_va)
    if fault == "label_mismatch":
        y_tr = (y_tr + 1) % 10  # the bug: a label map shifted against the validation one
    as_x = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    as_y = lambda a: torch.tensor(a, dtype=torch.int64)  # noqa: E731
    return as_x(X_tr), as_y(y_tr), as_x(X_va), as_y(y_va)


def make_model(fault: str) -> nn.Sequential:
    """The script's MLP; seeded so the probe can rebuild it exactly."""
    torch.manual_seed(0)
    width = 2 if fault == "too_small_model" else 64
    layers: list[nn.Module] = [nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 10)]
    if fault == "softmax_before_loss":
        layers.append(nn.Softmax(dim=1))  # the bug: probabilities into cross_entropy
    return nn.Sequential(*layers)


def main(argv: list[str] | None = None) -> int:
    """Train, then print the doctor's report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault", choices=FAULTS, default="none", help="the bug to put in")
    parser.add_argument("--steps", type=int, default=400, help="optimizer updates")
    parser.add_argument("--no-probe", action="store_true", help="passive checks only")
    parser.add_argument("--diagnoser", default="rules", help="registered name or module:Class")
    args = parser.parse_args(argv)

    X_tr, y_tr, X_va, y_va = load(args.fault)
    model = make_model(args.fault)
    trainable = model[2].parameters() if args.fault == "frozen_layer" else model.parameters()
    optimizer = torch.optim.Adam(trainable, lr=0.1 if args.fault == "lr_too_high" else 1e-3)
    if args.fault == "starved_loader":
        data: Dataset = SlowDigits(X_tr, y_tr, seconds=3e-4)
    else:
        data = TensorDataset(X_tr, y_tr)
    loader = DataLoader(data, batch_size=32, shuffle=True, drop_last=True)

    monitor = Monitor(model, optimizer)  # added line 1
    step = 0
    while step < args.steps:
        for xb, yb in monitor.batches(loader):  # added line 2 (was: `in loader`)
            if args.fault != "missing_zero_grad":
                optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            monitor.step(loss)  # added line 3
            step += 1
            if step % 50 == 0:
                monitor.log_eval(**evaluate(model, X_tr, y_tr, X_va, y_va))  # optional
            if step == args.steps:
                break
    monitor.close()

    probe = None
    if not args.no_probe:
        probe = Probe.from_user(lambda: make_model(args.fault), F.cross_entropy, X_tr, y_tr)
    print(doctor(monitor, args.diagnoser, probe=probe))
    return 0


@torch.no_grad()
def evaluate(model: nn.Module, X_tr, y_tr, X_va, y_va) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Accuracies and validation loss, in eval mode."""
    model.eval()
    val_out = model(X_va)
    out = {
        "train_acc": float((model(X_tr).argmax(1) == y_tr).float().mean()),
        "val_acc": float((val_out.argmax(1) == y_va).float().mean()),
        "val_loss": float(F.cross_entropy(val_out, y_va)),
    }
    model.train()
    return out


if __name__ == "__main__":
    raise SystemExit(main())
