"""mmpretrain's VGG froze its first stages only in train(): fine-tuned without a train()
call, the stages meant to be frozen were trained."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = (
    "https://github.com/OrderLab/TrainCheck-Evaluation-Workloads/blob/main/"
    "silent-issue-detection/bug-reprod-scripts/mmpretrain-702/README.md"
)
REPORTED = (
    "Fine-tuning VGG-19 on CIFAR-10 with frozen_stages set above zero (mmclassification "
    "v0.20.1, issue open-mmlab/mmpretrain 702, as TrainCheck's evaluation re-enacted it), the "
    "stages meant to be frozen were not."
)
DIAGNOSIS = (
    "A backbone's _freeze_stages() must run before its first forward; ResNet, RegNet and "
    "ConvNeXt call it in __init__ as well as in train(), but the others, VGG among them, "
    "only in train(), so unless model.train() is called explicitly before training the "
    "frozen stages keep requires_grad and are updated. Calling train() first (or freezing "
    "in __init__) fixes it."
)
LABEL = "other_fault"
MODEL = "cnn"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's 8x8 digits stand in for CIFAR-10 and a three-stage VGG-style network "
    "(no pretrained weights) for VGG-19, frozen_stages=1. The fine-tuning loop builds the "
    "model (in training mode, as every module starts) and never calls train() (faulty) or "
    "calls it first (fixed). The report names no loss or accuracy effect: the symptom is "
    "the suite's choice, the frozen stage's weights moving."
)
SYMPTOM = Symptom("weight_change", above=1e-3, layer="stage1.0")  # the frozen stage trains
SEED = 0
KIND = "multiclass"  # what the task predicts (the Monitor's kind)
REFERENCE = kit.DIGITS_REFERENCE
EPOCHS = 4
FIDELITY_DATA = "stand-in: scikit-learn's 8x8 digits for CIFAR-10"
FIDELITY_MODEL = "stand-in: a three-stage VGG-style network for VGG-19"
FIDELITY_CODE = "stand-in: our backbone; the freeze done only in train(), as in mmcls VGG"
REPORTED_EFFECT = "none given: the frozen stages are not frozen"
REENACTED_EFFECT = "the first stage's weights move by 87% of their norm; the twin's not at all"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "TrainCheck's evaluation README for the issue (stored code index): _freeze_stages must "
        "run before the first forward; VGG's is called only in train(), so without an explicit "
        "model.train() the frozen stages stay trainable; the mmpretrain issue itself was not "
        "read."
    ),
    label=(
        "matches: stages meant to be frozen that learn are the opposite of frozen_layer, none of "
        "the known faults: other_fault."
    ),
    mechanism=(
        "matches: frozen_stages set, the stages updated because train() is never called first; "
        "the twin calls it."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
FROZEN_STAGES = 1


class VGG(nn.Module):
    """Three conv stages and a classifier; the first FROZEN_STAGES freeze in train()."""

    def __init__(self) -> None:
        super().__init__()
        self.stage1 = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU())
        self.stage2 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.stage3 = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(32 * 2 * 2, 10)

    def _freeze_stages(self) -> None:
        for stage in [self.stage1, self.stage2, self.stage3][:FROZEN_STAGES]:
            stage.eval()
            for param in stage.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> "VGG":
        super().train(mode)
        self._freeze_stages()  # the only place VGG freezes
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stage3(self.stage2(self.stage1(x))).flatten(1))


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Cross-entropy, SGD with momentum."""
    kit.seed_everything(SEED)
    X_tr, y_tr, X_va, y_va = kit.digits(seed=SEED, images=True)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return VGG()

    model = make_model()
    if fixed:  # model.train() before training: the stages are frozen
        model.train()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = kit.batches_of(torch.utils.data.TensorDataset(X_tr, y_tr), 64)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for inputs, target in monitor.batches(loader):
            optimizer.zero_grad()
            out = model(inputs)
            loss = loss_fn(out, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, out, target)
        with torch.no_grad():
            monitor.log_eval(
                train_acc=kit.accuracy(model, X_tr, y_tr),
                val_acc=kit.accuracy(model, X_va, y_va),
                val_loss=kit.mean_loss(model, loss_fn, X_va, y_va),
            )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=X_tr, y=y_tr)
