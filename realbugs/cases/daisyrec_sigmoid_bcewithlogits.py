"""A recommender's scores pass through sigmoid before BCEWithLogitsLoss: the loss does not
converge."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import OWN, Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/yudi-mars/daisyRec/pull/15"
REPORTED = "Trained with BCEWithLogitsLoss, the model's loss does not converge."
DIAGNOSIS = (
    "The model applies a sigmoid to its scores and BCEWithLogitsLoss applies another; the "
    "merged fix drops the model's sigmoid because the loss already contains one."
)
LABEL = "softmax_before_loss"
MODEL = "embedding"
OPTIMIZER = "Adam"
DATA = (
    "Generated implicit feedback: 300 users and 200 items with 8 hidden factors; a pair is a "
    "positive when its hidden affinity is in the top 20%, and each positive is paired with a "
    "sampled negative (stands in for the library's MovieLens-style datasets)."
)
SYMPTOM = Symptom("loss_ratio", above=0.6)  # the loss stays near where it started
SEED = 0
KIND = "binary"
REFERENCE = Reference(
    0.867,
    (
        "scikit-learn's TruncatedSVD (rank 8) of the training interactions, thresholded on the "
        "training pairs (measured: 0.867)"
    ),
)
FIDELITY_DATA = "stand-in: generated implicit feedback (300 users, 200 items, rank 8) for MovieLens"
FIDELITY_MODEL = OWN
FIDELITY_CODE = "stand-in: a plain point-wise loop with Adam at 0.01"
REPORTED_EFFECT = "none given: the loss does not converge"
REENACTED_EFFECT = (
    "the loss ends at 0.77 of its start against the twin's 0.29; held-out accuracy 0.835 "
    "against 0.844"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = (
    (
        "the evaluation's threshold follows the output: 0.5 on the faulty form's probabilities, 0"
        " on the twin's logits (the same even odds, not the source's code)"
    ),
)
EPOCHS = 12
USERS, ITEMS, FACTORS = 300, 200, 8


class MF(nn.Module):
    """Matrix factorization: a user and an item embedding, their dot product as the score."""

    def __init__(self, users: int, items: int, factors: int, *, sigmoid: bool) -> None:
        super().__init__()
        self.embed_user = nn.Embedding(users, factors)
        self.embed_item = nn.Embedding(items, factors)
        nn.init.normal_(self.embed_user.weight, std=0.1)
        nn.init.normal_(self.embed_item.weight, std=0.1)
        self.sigmoid = sigmoid

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        pred = (self.embed_user(pairs[:, 0]) * self.embed_item(pairs[:, 1])).sum(dim=-1)
        return torch.sigmoid(pred) if self.sigmoid else pred


def interactions(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive pairs (top fifth of hidden affinity) and as many sampled negatives."""
    rng = np.random.default_rng(seed)
    affinity = rng.normal(size=(USERS, FACTORS)) @ rng.normal(size=(FACTORS, ITEMS))
    positive = affinity > np.quantile(affinity, 0.8)
    users, items = np.nonzero(positive)
    neg_users, neg_items = np.nonzero(~positive)
    pick = rng.choice(len(neg_users), size=len(users), replace=False)
    pairs = np.concatenate(
        [np.stack([users, items], 1), np.stack([neg_users[pick], neg_items[pick]], 1)]
    )
    labels = np.concatenate([np.ones(len(users)), np.zeros(len(users))]).astype(np.float32)
    order = rng.permutation(len(labels))
    return torch.from_numpy(pairs[order]), torch.from_numpy(labels[order])


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Train MF point-wise; report the share of held-out pairs ranked on the right side."""
    kit.seed_everything(SEED)
    pairs, labels = interactions(SEED)
    cut = int(0.8 * len(labels))
    train_pairs, train_labels, val_pairs, val_labels = (
        pairs[:cut],
        labels[:cut],
        pairs[cut:],
        labels[cut:],
    )

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return MF(USERS, ITEMS, FACTORS, sigmoid=not fixed)

    model = make_model()
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    dataset = torch.utils.data.TensorDataset(train_pairs, train_labels)
    loader = torch.utils.data.DataLoader(  # whole batches at once: the library's pairs are arrays
        dataset,
        sampler=torch.utils.data.BatchSampler(
            torch.utils.data.RandomSampler(dataset), batch_size=256, drop_last=False
        ),
        batch_size=None,
    )
    threshold = 0.5 if not fixed else 0.0  # the score that means "even odds" in each form

    def hits(x: torch.Tensor, y: torch.Tensor) -> float:
        with torch.no_grad():
            return float(((model(x) > threshold).float() == y).float().mean())

    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for batch, label in monitor.batches(loader):
            optimizer.zero_grad()
            prediction = model(batch)
            loss = criterion(prediction, label)
            loss.backward()
            optimizer.step()
            monitor.step(loss)
        monitor.log_eval(
            train_acc=hits(train_pairs, train_labels),
            val_acc=hits(val_pairs, val_labels),
            val_loss=kit.mean_loss(model, criterion, val_pairs, val_labels),
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=criterion, X=train_pairs, y=train_labels
    )
