"""A port from TensorFlow passes dropout_keep_prob=1 to PyTorch's Dropout, whose argument is
the probability of zeroing: in training every feature is zeroed and all scores are equal."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/qijiezhao/s3d.pytorch/issues/1"
REPORTED = (
    "Training the S3D implementation on UCF101, the scores of every example in a minibatch "
    "are all equal; the reporter suspects dropout_keep_prob = 1, and another user finds the "
    "model converging very slowly."
)
DIAGNOSIS = (
    "nn.Dropout3d's argument is the probability of an element being zeroed, so the TensorFlow "
    "name's keep probability of 1 zeroes every feature in training: the logits layer sees "
    "zeros, only its bias can move, and no gradient reaches the layers below; the value "
    "should be 0 (no dropout), as the reporter proposes."
)
LABEL = "frozen_layer"
MODEL = "cnn"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits as 8x8 images stand in for UCF101's clips, and a small 2-D network "
    "with S3D's head (average pooling, Dropout with the keep probability passed as p, a 1x1 "
    "convolution to the logits) for S3D, fine-tuned by cross-entropy with SGD and momentum."
)
SYMPTOM = Symptom("weight_change", below=1e-9, layer="features.0")  # the features never move
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for UCF101's clips"
FIDELITY_MODEL = "stand-in: a small 2-D network with S3D's pooling, dropout and 1x1 logits"
FIDELITY_CODE = "stand-in: a plain fine-tuning loop with SGD"
REPORTED_EFFECT = "none given: every example's scores equal in a minibatch; very slow convergence"
REENACTED_EFFECT = (
    "the features change by 0 and the loss stays at 0.999 of its start, validation accuracy "
    "0.078; the twin's features move (1.08 of their size) and it validates at 0.972"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): the scores of every example in a minibatch are equal; "
        "Dropout3d's argument is the probability of zeroing, so dropout_keep_prob = 1 should be "
        "0; another user finds convergence very slow; no maintainer reply."
    ),
    label=(
        "matches: a dropout that zeroes every feature leaves the layers below without gradient "
        "and the logits layer's weights without signal, frozen in effect (frozen_layer), as the "
        "suite labels such a dropout (realbugs/README.md, 'The label')."
    ),
    mechanism="matches: p = 1 in the dropout before the logits, the twin at the reporter's 0.",
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 6
DROPOUT_KEEP_PROB = 1.0  # the TensorFlow argument's value, as the port passes it on


class S3DHead(nn.Module):
    """Features, S3D's head: pooling, dropout, a 1x1 convolution to the logits."""

    def __init__(self, *, p: float) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
        )
        self.avg_pool = nn.AvgPool2d(4)
        self.dropout = nn.Dropout2d(p)
        self.logits = nn.Conv2d(32, 10, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dropout(self.avg_pool(self.features(x)))
        return self.logits(y).flatten(1)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train in train mode (dropout on), evaluate in eval mode (dropout off)."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED, images=True)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return S3DHead(p=0.0 if fixed else DROPOUT_KEEP_PROB)

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_train, y_train), 32)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        model.train()
        for clips, labels in monitor.batches(loader):
            optimizer.zero_grad()
            scores = model(clips)
            loss = criterion(scores, labels)
            loss.backward()
            optimizer.step()
            monitor.step(loss, scores, labels)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
