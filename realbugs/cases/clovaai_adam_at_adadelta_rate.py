"""A text recognizer switched from Adadelta to Adam keeps the default rate of 1, meant for
Adadelta: the accuracy stays at zero."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit

SOURCE = "https://github.com/clovaai/deep-text-recognition-benchmark/issues/23"
REPORTED = (
    "Fine-tuning with the --adam option (TPS-ResNet-BiLSTM-Attn), the loss settles quickly "
    "but the accuracy always stays at zero; with the default Adadelta it grows."
)
DIAGNOSIS = (
    "The default --lr is 1, set for Adadelta; with Adam it is far too high. The maintainer: "
    "use a learning rate such as 0.001 with Adam (the reporter confirmed it was the cause)."
)
LABEL = "lr_too_high"
MODEL = "cnn"
OPTIMIZER = "Adam"
DATA = (
    "scikit-learn's digits as 8x8 images stand in for the word crops, and one character to "
    "read per image for the word; a small convolutional recognizer for TPS-ResNet-BiLSTM-Attn. "
    "The repository's loop: Adam with betas (0.9, 0.999) at --lr, gradient norms clipped at "
    "5, cross-entropy; the fix passes --lr 0.001."
)
SYMPTOM = Symptom("final_val_acc", below=0.3)  # accuracy stays near zero (chance is 0.1)
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for the word crops"
FIDELITY_MODEL = "stand-in: a small convolutional classifier for TPS-ResNet-BiLSTM-Attn"
FIDELITY_CODE = "source's own"
REPORTED_EFFECT = "accuracy 0 throughout, while the loss settles; it grows with Adadelta"
REENACTED_EFFECT = "PLACEHOLDER 0"
OBSERVED = True
EPOCHS = 4
GRAD_CLIP = 5  # the repository's --grad_clip


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """train.py's step with --adam: forward, cost, backward, clip, step."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED, images=True)
    lr = 0.001 if fixed else 1.0  # --lr: the fix, or the default meant for Adadelta

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 2 * 2, 10),
        )

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999))
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_train, y_train), 32)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        model.train()
        for image, text in monitor.batches(loader):
            preds = model(image)
            cost = criterion(preds, text)
            model.zero_grad()
            cost.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
            optimizer.step()
            monitor.step(cost, preds, text)
        model.eval()
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
