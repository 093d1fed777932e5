"""A-GCN detaches its learned adjacency: the two matrices that build it can never be updated."""

import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/queenie88/A-GCN/issues/4"
REPORTED = (
    "The adaptive adjacency matrix is detached from the computation graph, so the two weight "
    "matrices that compute it (W_phi and W_theta) receive no gradient and are never updated."
)
DIAGNOSIS = "The .detach() should not be there; the authors removed it (confirmed in the thread)."
LABEL = "frozen_layer"
MODEL = "embedding"
OPTIMIZER = "SGD"
DATA = (
    "scikit-learn's digits stand in for the multi-label images: a linear backbone gives image "
    "features, the 10 classes are the graph's nodes with learned embeddings, and the GCN over "
    "the adaptive adjacency turns them into the classifiers (single-label cross-entropy)."
)
SYMPTOM = Symptom("weight_change", below=1e-9, layer="phi")  # W_phi never moves
SEED = 0
KIND = "multiclass"
REFERENCE = kit.DIGITS_REFERENCE
FIDELITY_DATA = "stand-in: digits for the multi-label COCO images"
FIDELITY_MODEL = (
    "stand-in: a linear backbone and a 2-layer GCN on 10 label nodes for the ResNet-101 A-GCN"
)
FIDELITY_CODE = "stand-in: a plain single-label loop, SGD at 0.01 with momentum"
REPORTED_EFFECT = (
    "none given: W_phi and W_theta get no gradient and never change (read from the code)"
)
REENACTED_EFFECT = (
    "W_phi changes by 0 (the twin's by 0.53 of its size); validation accuracy 0.889 against "
    "the twin's 0.958"
)
OBSERVED = False
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 10
CLASSES, EMBED, FEATURES = 10, 16, 32


class AGCN(nn.Module):
    """Backbone features scored against class classifiers from a GCN on an adaptive adjacency."""

    def __init__(self, *, detach: bool) -> None:
        super().__init__()
        self.detach = detach
        self.backbone = nn.Sequential(nn.Linear(64, FEATURES), nn.ReLU())
        self.label_embedding = nn.Embedding(CLASSES, EMBED)
        self.phi = nn.Linear(EMBED, EMBED, bias=False)  # W_phi
        self.theta = nn.Linear(EMBED, EMBED, bias=False)  # W_theta
        self.gc1 = nn.Linear(EMBED, EMBED, bias=False)  # the two graph convolutions
        self.gc2 = nn.Linear(EMBED, FEATURES, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes = self.label_embedding.weight
        adaptive = torch.softmax(self.phi(nodes) @ self.theta(nodes).t(), dim=1)
        adj = (adaptive + torch.eye(CLASSES)) / 2  # the source adds the identity's self-loops
        if self.detach:
            adj = adj.detach()
        hidden = nn.functional.leaky_relu(adj @ self.gc1(nodes), 0.2)
        classifiers = adj @ self.gc2(hidden)
        return self.backbone(x) @ classifiers.t()


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train end to end with SGD and momentum."""
    kit.seed_everything(SEED)
    X_train, y_train, X_val, y_val = kit.digits(seed=SEED)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return AGCN(detach=not fixed)

    model = make_model()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_train, y_train), batch_size=32, shuffle=True
    )
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for inputs, target in monitor.batches(loader):
            output = model(inputs)
            loss = criterion(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(loss, output, target)
        monitor.log_eval(
            train_acc=kit.accuracy(model, X_train, y_train),
            val_acc=kit.accuracy(model, X_val, y_val),
            val_loss=kit.mean_loss(model, criterion, X_val, y_val),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=criterion, X=X_train, y=y_train)
