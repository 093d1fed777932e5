"""A text recognizer switched from Adadelta to Adam keeps the default rate of 1, meant for
Adadelta: the accuracy stays at zero.

Issue 51 settled its texts: REENACTED_EFFECT had been left a placeholder, now measured;
DIAGNOSIS no longer says the reporter confirmed the cause (they said they would try the
lower rate, and the thread ends there); FIDELITY_CODE no longer claims the source's own
code, since the reporter fine-tuned a pretrained recognizer and the case trains one from
scratch with one character per image."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/clovaai/deep-text-recognition-benchmark/issues/23"
REPORTED = (
    "Fine-tuning with the --adam option (TPS-ResNet-BiLSTM-Attn), the loss settles quickly "
    "but the accuracy always stays at zero; with the default Adadelta it grows."
)
DIAGNOSIS = (
    "The default --lr is 1, set for Adadelta; with Adam it is far too high. The maintainer: "
    "try another rate with Adam, such as --lr 0.001 (and check the character set). The "
    "reporter answered that the rate was likely their problem and that they would try it; "
    "the thread does not say it was tried."
)
LABEL = "lr_too_high"
MODEL = "cnn"
OPTIMIZER = "Adam"
DATA = (
    "scikit-learn's digits as 8x8 images stand in for the word crops, and one character to "
    "read per image for the word; a small convolutional recognizer, trained from scratch, for "
    "the pretrained TPS-ResNet-BiLSTM-Attn the reporter fine-tuned. The repository's step: "
    "Adam with betas (0.9, 0.999) at --lr, gradient norms clipped at 5, cross-entropy (one "
    "class per image for the attention decoder's per-character loss); the fix passes "
    "--lr 0.001."
)
SYMPTOM = Symptom("final_val_acc", below=0.3)  # accuracy stays near zero (chance is 0.1)
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for the word crops"
FIDELITY_MODEL = "stand-in: a small convolutional classifier for TPS-ResNet-BiLSTM-Attn"
FIDELITY_CODE = (
    "stand-in: training from scratch for fine-tuning the pretrained model, one cross-entropy "
    "per image for the attention decoder's per-character loss (the optimizer, its betas, the "
    "clipping at 5 and the two rates are the repository's)"
)
REPORTED_EFFECT = "accuracy 0 throughout, while the loss settles; it grows with Adadelta"
REENACTED_EFFECT = (
    "the loss jumps to about 3,200 at the second step, then settles near 2.4 (chance's 2.30 "
    "is ln 10) while validation accuracy ends at 0.13 after 4 epochs (training 0.09); the "
    "twin at 0.001 reaches 0.92 (measured on an AMD EPYC)"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue thread (stored issues corpus): the report, the maintainer's two suggestions "
        "(--lr 0.001 with Adam, the character set) and the reporter's reply that the first is "
        "likely theirs and they will try it; nothing after."
    ),
    label=(
        "matches: Adam at the Adadelta default of 1 is a rate far above Adam's working one "
        "(lr_too_high); the maintainer names it first, but the thread does not confirm it was the"
        " cause."
    ),
    mechanism=(
        "partly: the rate is the source's (1 against 0.001, Adam, clipping at 5), the training is"
        " not: the reporter fine-tuned a pretrained TPS-ResNet-BiLSTM-Attn on words, the case "
        "trains a small CNN from scratch on digits."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
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
