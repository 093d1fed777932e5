"""An ISIC 2018 skin-lesion classifier validated on images whose lesions it trained on: the same
lesion photographed twice landed on both sides of the split."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/yuanqing811/ISIC2018/issues/2"
REPORTED = (
    "The repository's task-3 classifier reported about 88% validation accuracy and 76% "
    "balanced accuracy; asked whether the split accounted for lesion IDs, the maintainers "
    "found it did not, and with a split by lesion the scores fell to 83% and 68.5%."
)
DIAGNOSIS = (
    "The training set photographs many lesions more than once; partition_data shuffled the "
    "images one by one, so images of one lesion fell into both training and validation and "
    "the validation score measured recall of lesions already seen. The fix (pull request 3) "
    "shuffles the lesion IDs from the supplementary groupings file and keeps each lesion's "
    "images together."
)
LABEL = "leaky_split"
MODEL = "mlp"
OPTIMIZER = "Adam"
DATA = (
    "1,500 generated 'lesions' stand in for the 7,470 of HAM10000: points of 32 features in 7 "
    "overlapping classes (scikit-learn's make_classification) with HAM10000's class shares "
    "(NV 67%, MEL and BKL 11%, BCC 5%...), each photographed 1 to 4 times (72%, 19%, 6%, 3% of "
    "the lesions, about HAM10000's 1.34 images a lesion) as the lesion's point plus small "
    "noise; the features stand in for the pretrained InceptionV3's pooled activations and "
    "the repository's head (one dense layer of 128 ReLU units, softmax, batches of 32, Adam) "
    "is trained on them, at 0.001 for the repository's 0.0001 (20 epochs for its 30 of "
    "fine-tuning). The split is the repository's: five folds and a sixth held out, fold 0 "
    "for validation."
)
SYMPTOM = Symptom("final_val_acc", above=0.80)  # too good: lesions seen in training
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    0.720,
    (
        "scikit-learn's LogisticRegression (max_iter=3000) on the lesion-grouped split's "
        "training images, scored on its validation images: 0.720"
    ),
)
FIDELITY_DATA = "stand-in: generated lesion features in HAM10000's class shares for the photos"
FIDELITY_MODEL = "stand-in: the repository's dense head of 128 units on features for InceptionV3"
FIDELITY_CODE = (
    "stand-in: our loop with the repository's partition_data and partition_task3_data; Adam at "
    "0.001 for 0.0001 on the stand-in features"
)
REPORTED_EFFECT = (
    "88% accuracy and 76% balanced accuracy with the image-level split, against 83% and "
    "68.5% split by lesion"
)
REENACTED_EFFECT = (
    "validation accuracy 0.841 with 36% of the validation images from lesions in training, "
    "against the twin's 0.762 split by lesion (training accuracy 0.94 and 0.95)"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue and pull request 3 (stored issues corpus): the maintainer's replies that the "
        "split did not take lesion IDs into account, then that it does, with balanced accuracy "
        "down from 76% to 68.5%."
    ),
    label="matches: validation sharing lesions with training is leaky_split.",
    mechanism=(
        "matches: images split one by one against split by lesion, on generated lesion features."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 20
LESIONS, FEATURES, CLASSES = 1500, 32, 7
#: HAM10000's class shares: MEL, NV, BCC, AKIEC, BKL, DF, VASC (the ground truth's columns).
SHARES = (0.111, 0.669, 0.051, 0.033, 0.110, 0.011, 0.014)
PHOTOS = (0.72, 0.19, 0.06, 0.03)  # share of lesions photographed 1, 2, 3, 4 times
FOLDS, TEST_SPLIT, FOLD = 5, 1.0 / 6, 0  # partition_data's k, test_split and i


def photographs(seed: int) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Each image's features, its class and its lesion ID."""
    from sklearn.datasets import make_classification

    shares = np.array(SHARES) / sum(SHARES)
    points, kinds = make_classification(
        n_samples=LESIONS,
        n_features=FEATURES,
        n_informative=16,
        n_redundant=0,
        n_classes=CLASSES,
        n_clusters_per_class=2,
        weights=list(shares),
        flip_y=0.0,
        random_state=seed,
    )
    points = (points - points.mean(0)) / points.std(0)
    rng = np.random.default_rng(seed)
    photos = rng.choice(len(PHOTOS), size=LESIONS, p=PHOTOS) + 1
    lesion = np.repeat(np.arange(LESIONS), photos)
    features = points[lesion] + 0.15 * rng.normal(size=(len(lesion), FEATURES))
    return (
        torch.tensor(features, dtype=torch.float32),
        torch.from_numpy(kinds[lesion]),
        lesion,
    )


def fold_sizes(n: int) -> np.ndarray:
    """(k + 1) sets: [0, k) for training and validation, -1 the test set (partition_data)."""
    n_set = int(n * (1.0 - TEST_SPLIT)) // FOLDS
    return np.array([i for i in range(FOLDS) for _ in range(n_set)] + [-1] * (n - n_set * FOLDS))


def partition(lesion: np.ndarray, by_lesion: bool) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows) of the repository's split, seed 42."""
    folds = fold_sizes(len(lesion))
    rng = np.random.default_rng(42)
    if by_lesion:  # partition_task3_data: shuffle the lesion IDs, keep each lesion's images
        ids = rng.permutation(lesion.max() + 1)
        images = np.concatenate([np.nonzero(lesion == i)[0] for i in ids])
        assigned = np.empty(len(lesion), dtype=int)
        assigned[images] = folds
    else:  # partition_data: shuffle the images one by one
        assigned = folds[rng.permutation(len(lesion))]
    train = (assigned != FOLD) & (assigned != -1)
    return np.nonzero(train)[0], np.nonzero(assigned == FOLD)[0]


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The head trained on the training folds, validated on fold 0 each epoch."""
    kit.seed_everything(SEED)
    features, kinds, lesion = photographs(SEED)
    train_rows, val_rows = partition(lesion, by_lesion=fixed)
    train_x, train_y = features[train_rows], kinds[train_rows]
    val_x, val_y = features[val_rows], kinds[val_rows]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, CLASSES))

    model = make_model()
    loss_fn = nn.CrossEntropyLoss()  # categorical cross-entropy on the softmax
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(train_x, train_y), 32)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for xb, yb in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(xb)
            loss = loss_fn(logits, yb)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, yb)
        monitor.log_eval(
            train_acc=kit.accuracy(model, train_x, train_y),
            val_acc=kit.accuracy(model, val_x, val_y),
            val_loss=kit.mean_loss(model, loss_fn, val_x, val_y),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=train_x, y=train_y)
