"""A multi-label trainer scores its metrics on a softmax of the outputs: the labels compete
for one unit of probability, and the F1 it reports stays low while the model learns."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/torchgeo/torchgeo/pull/791"
REPORTED = (
    "MultiLabelClassificationTask applies torch.softmax to the outputs before computing the "
    "metrics, though each output logit is independent of the others in the multi-label case."
)
DIAGNOSIS = (
    "Softmax makes the labels share one unit of probability, so an example with several "
    "labels can never have them all above the metrics' 0.5 threshold; the pull request uses "
    "torch.sigmoid, as the BCEWithLogitsLoss the task trains with does."
)
LABEL = "other_fault"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "scikit-learn's make_multilabel_classification (12 labels, about 3 per example, 40 "
    "word-count features, standardized) stands in for BigEarthNet's multi-label patches, and "
    "a small MLP for the task's ResNet; the loss is BCEWithLogitsLoss on the logits, as in "
    "the task, and the metrics are micro F1 at the 0.5 threshold on softmax(outputs), or, "
    "fixed, on sigmoid(outputs). No failure was reported (read from the code): the symptom, "
    "a low F1 while the loss falls, is the suite's choice."
)
SYMPTOM = Symptom("final_val_acc", below=0.3)  # the F1 reported stays low
SEED = 0
KIND = "multilabel"
REFERENCE = Reference(
    0.467,
    "scikit-learn's MLPClassifier (64 hidden) on the same split, micro F1 at 0.5: 0.467",
)
FIDELITY_DATA = "stand-in: generated multi-label counts for BigEarthNet"
FIDELITY_MODEL = "stand-in: a small MLP for the task's ResNet"
FIDELITY_CODE = "stand-in: a plain loop with the task's loss and its metrics' rule"
REPORTED_EFFECT = "none given: the metrics are computed on softmax outputs (read from the code)"
REENACTED_EFFECT = (
    "micro F1 0.164 on softmax outputs while the loss falls to 0.66 of its start; the twin, "
    "the same model scored on sigmoids, reports 0.460"
)
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the pull request's description (stored issues corpus): MultiLabelClassificationTask "
        "applied torch.softmax before the metrics though each logit is independent; it uses "
        "torch.sigmoid; the pull request is open, not merged (a later one replaced the trainers)."
    ),
    label=(
        "matches: metrics computed on the wrong activation leave training untouched (the loss is "
        "BCEWithLogitsLoss on the logits), so it is not softmax_before_loss: other_fault."
    ),
    mechanism=(
        "matches: softmax before the multi-label metrics, the twin with the pull request's sigmoid."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 10
LABELS, FEATURES = 12, 40


def micro_f1(probabilities: torch.Tensor, target: torch.Tensor) -> float:
    """torchmetrics' multilabel F1, micro-averaged, at the 0.5 threshold."""
    predicted, truth = probabilities > 0.5, target > 0.5
    tp = float((predicted & truth).sum())
    wrong = float((predicted ^ truth).sum())
    return 2 * tp / (2 * tp + wrong) if tp + wrong else 0.0


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """training_step's loss on logits; the metrics on the activated outputs."""
    from sklearn.datasets import make_multilabel_classification

    kit.seed_everything(SEED)
    X, Y = make_multilabel_classification(
        n_samples=2000,
        n_features=FEATURES,
        n_classes=LABELS,
        n_labels=3,
        random_state=SEED,
    )
    X = (X - X.mean(0)) / X.std(0)
    X_tr, Y_tr, X_va, Y_va = kit.split(X.astype("float32"), Y.astype("float32"), seed=SEED)
    X_train, y_train = torch.from_numpy(X_tr), torch.from_numpy(Y_tr)
    X_val, y_val = torch.from_numpy(X_va), torch.from_numpy(Y_va)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, LABELS))

    def activate(y_hat: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(y_hat) if fixed else torch.softmax(y_hat, dim=-1)

    @torch.no_grad()
    def f1(x: torch.Tensor, y: torch.Tensor) -> float:
        return micro_f1(activate(model(x)), y)

    model = make_model()
    loss_fn = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_train, y_train), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for x, y in monitor.batches(loader):
            optimizer.zero_grad()
            y_hat = model(x)
            loss = loss_fn(y_hat, y)
            loss.backward()
            optimizer.step()
            monitor.step(loss, y_hat, y)
        monitor.log_eval(
            train_f1=f1(X_train, y_train),
            val_f1=f1(X_val, y_val),
            val_loss=kit.mean_loss(model, loss_fn, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X_train, y=y_train)
