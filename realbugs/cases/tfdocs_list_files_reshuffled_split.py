"""TensorFlow's "Load images" tutorial split a file list that list_files reshuffled on every
pass: the validation files were drawn again from the whole set, most of them training files."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/tensorflow/docs/pull/1619"
REPORTED = (
    "In the 'Load images' tutorial's tf.data section, about 80% of the elements of val_ds are "
    "also in train_ds (the reporter counted the file paths they share), and the model's "
    "validation accuracy is very close to its training accuracy."
)
DIAGNOSIS = (
    "Dataset.list_files shuffles the file names by default, on every iteration, so the "
    "shuffle with reshuffle_each_iteration=False after it still sees a new order each pass: "
    "train_ds (skip) and val_ds (take) are cut from different permutations and the validation "
    "files are mostly training files. The merged fix lists the files with shuffle=False."
)
LABEL = "leaky_split"
MODEL = "cnn"
OPTIMIZER = "Adam"
DATA = (
    "600 generated 16x16 colour images of 5 classes stand in for the 3,670 flower photos: "
    "each image is one of three blob patterns of its class, shifted, over a random blob of "
    "clutter and pixel noise, so a CNN can memorize its training images but generalizes only "
    "partly, as the tutorial's model does on the photos. The tutorial's CNN (3x3 convolutions "
    "with max pooling, a dense layer of 128, Adam at Keras' 0.001, batches of 32) with two "
    "convolution blocks of 16 filters for its three of 32 (the images are small), trained 14 "
    "epochs for the tutorial's 3 + 3 so that it overfits as the photos' model does. The faulty "
    "split draws the file order twice (once for the training cut, once for the validation "
    "cut); the fix draws it once."
)
SYMPTOM = Symptom("train_val_gap", below=0.08)  # validation as good as training
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    0.525,
    (
        "scikit-learn's LogisticRegression (max_iter=3000) on the pixels of the honest split's "
        "training images, scored on its validation images: 0.525"
    ),
)
FIDELITY_DATA = "stand-in: generated 16x16 blob images of 5 classes for the flower photos"
FIDELITY_MODEL = (
    "stand-in: the tutorial's CNN with two 16-filter convolution blocks for three of 32"
)
FIDELITY_CODE = (
    "stand-in: our loop; the file order drawn twice, as list_files' reshuffle drew it, 14 "
    "epochs for the tutorial's 3 + 3"
)
REPORTED_EFFECT = (
    "about 80% of val_ds in train_ds; validation accuracy very close to training accuracy"
)
REENACTED_EFFECT = (
    "86% of the validation images are training images; validation accuracy 0.683 against "
    "training 0.715 (gap 0.03); the twin validates at 0.542 against 0.715 (gap 0.17)"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the merged pull request's description (stored issues corpus): list_files shuffles the "
        "file names by default on every iteration, so although the later shuffle does not "
        "reshuffle, about 80% of val_ds is in train_ds, validation accuracy close to training's; "
        "the fix lists the files with shuffle=False."
    ),
    label="matches: validation files that are training files is leaky_split.",
    mechanism=(
        "matches: training and validation cut from different permutations each pass, the twin "
        "from one fixed order."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 14
IMAGES, SIZE, CLASSES, PATTERNS = 600, 16, 5, 3
FILTERS, DENSE, LR = 16, 128, 1e-3  # the tutorial's 32 filters halved (small images)
VAL_SHARE = 0.2  # the tutorial's val_size = int(image_count * 0.2)


def blobs(rng: np.random.Generator) -> np.ndarray:
    """Three Gaussian blobs of random colour on a (3, SIZE, SIZE) canvas."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    image = np.zeros((3, SIZE, SIZE))
    for _ in range(3):
        cy, cx = rng.uniform(0, SIZE, 2)
        spread = rng.uniform(1.5, 4.0)
        colour = rng.normal(0, 1, 3)
        image += colour[:, None, None] * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / spread**2 / 2)
    return image


def photos(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The stand-in photos, standardized, and their class ids."""
    rng = np.random.default_rng(seed)
    patterns = [[blobs(rng) for _ in range(PATTERNS)] for _ in range(CLASSES)]
    labels = rng.integers(0, CLASSES, IMAGES)
    images = np.zeros((IMAGES, 3, SIZE, SIZE), np.float32)
    for i, label in enumerate(labels):
        shift = tuple(rng.integers(-3, 4, 2))
        pattern = np.roll(patterns[label][rng.integers(PATTERNS)], shift, axis=(1, 2))
        images[i] = pattern + blobs(rng) + 0.5 * rng.normal(0, 1, pattern.shape)
    images = (images - images.mean()) / images.std()
    return torch.from_numpy(images), torch.from_numpy(labels)


def file_order(rng: np.random.Generator) -> np.ndarray:
    """list_files, then shuffle(image_count, reshuffle_each_iteration=False): one pass's order."""
    return rng.permutation(IMAGES)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """train_ds = list_ds.skip(val_size), val_ds = list_ds.take(val_size); Keras-style fit."""
    kit.seed_everything(SEED)
    images, labels = photos(SEED)
    rng = np.random.default_rng(SEED)
    val_size = int(IMAGES * VAL_SHARE)
    train_pass = file_order(rng)
    # Faulty: list_files reshuffles, so the pass that takes val_ds sees another order.
    val_pass = train_pass if fixed else file_order(rng)
    train_idx = torch.from_numpy(train_pass[val_size:])
    val_idx = torch.from_numpy(val_pass[:val_size])
    train_x, train_y = images[train_idx], labels[train_idx]
    val_x, val_y = images[val_idx], labels[val_idx]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return nn.Sequential(
            nn.Conv2d(3, FILTERS, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(FILTERS, FILTERS, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(FILTERS * 2 * 2, DENSE),
            nn.ReLU(),
            nn.Linear(DENSE, CLASSES),
        )

    model = make_model()
    loss_fn = nn.CrossEntropyLoss()  # SparseCategoricalCrossentropy(from_logits=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
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
