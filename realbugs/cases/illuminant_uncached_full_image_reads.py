"""Illuminant estimation on small patches, each read by loading and decoding its whole photo:
without the cache, training waits on the loader."""

import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/swift-n-brutal/illuminant_estimation/issues/2"
REPORTED = (
    "Training on one's own large dataset, loading takes very long; with the cache=False "
    "option added for it, training becomes extremely slow, and even 30 loader processes are "
    "slower than the cached version."
)
DIAGNOSIS = (
    "The maintainer: without the cache every sample loads its whole image (about 3M pixels) "
    "before cropping a 44x44 patch, so the loader, not the network, sets the pace; keep the "
    "images in memory (cache=True), or cut them into small pieces beforehand."
)
LABEL = "starved_loader"
MODEL = "cnn"
OPTIMIZER = "Adam"
DATA = (
    "Generated scenes stand in for the GS568 photos: 32 textured 256x256 RGB images, each "
    "lit by its own illuminant, stored as 8-bit .npy files in a temporary folder; a sample is "
    "a 44x44 patch at a random place and the target is its scene's illuminant chromaticity "
    "(r, g, b). Without the cache a sample loads and decodes its whole image to crop the "
    "patch, as the dataset's _get() does with cache=False; with it the images are decoded "
    "once, before training. A small CNN regresses the chromaticity by squared error, with "
    "Adam at 0.01, 800 patches an epoch; validation patches come from 8 held-out scenes."
)
SYMPTOM = Symptom("wait_share", above=0.5)  # most of each step waits for the batch
SEED = 0
KIND = "regression"
REFERENCE = Reference(
    0.814,
    "gray world (the patch's mean colour, normalized to sum 1) as the estimate, scored on the "
    "validation patches: R² 0.814",
)
FIDELITY_DATA = "stand-in: generated lit textures for the GS568 photographs"
FIDELITY_MODEL = "stand-in: a small CNN for the repository's patch network"
FIDELITY_CODE = "stand-in: a plain patch-regression loop with Adam"
REPORTED_EFFECT = "none given: training 'extremely slow', 30 loader processes still slower"
REENACTED_EFFECT = (
    "61% of each step spent waiting for the batch; the cached twin waits 12% and reaches the "
    "same R² (0.787)"
)
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "not read: the stored issues corpus returned no copy of the issue (searched for the "
        "repository with its symptom, slow training without the cache); the case's texts are from"
        " when it was written."
    ),
    label=(
        "not checked: the issue could not be read again; by the case's own diagnosis (every "
        "sample loads a whole image to crop a patch) starved_loader fits."
    ),
    mechanism="not checked: the issue could not be read again.",
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 3
SCENES, TRAIN_SCENES, SIDE, PATCH = 32, 24, 256, 44
SAMPLES = 800  # patches drawn per epoch


def scenes(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """8-bit images of lit random textures, and each one's illuminant chromaticity."""
    rng = np.random.default_rng(seed)
    light = rng.uniform(0.3, 1.0, size=(SCENES, 3))
    light /= light.sum(axis=1, keepdims=True)
    coarse = rng.uniform(0.2, 1.0, size=(SCENES, SIDE // 16, SIDE // 16, 3))
    texture = coarse.repeat(16, axis=1).repeat(16, axis=2)
    texture *= rng.uniform(0.8, 1.0, size=(SCENES, SIDE, SIDE, 1))
    images = np.clip(texture * light[:, None, None, :] * 2.5 * 255, 0, 255).astype(np.uint8)
    return images, light.astype(np.float32)


class PatchDataset(torch.utils.data.Dataset):
    """(scene, top, left) -> the patch as a float CHW tensor and the scene's illuminant."""

    def __init__(
        self, folder: Path, light: np.ndarray, picks: np.ndarray, memory: dict | None
    ) -> None:
        self.folder, self.light, self.picks, self.memory = folder, light, picks, memory

    def read(self, scene: int) -> np.ndarray:
        return np.load(self.folder / f"{scene}.npy").astype(np.float32) / 255.0

    def __len__(self) -> int:
        return len(self.picks)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        scene, top, left = self.picks[i]
        image = self.memory[scene] if self.memory is not None else self.read(scene)
        patch = image[top : top + PATCH, left : left + PATCH]
        return torch.from_numpy(patch.transpose(2, 0, 1).copy()), torch.from_numpy(
            self.light[scene]
        )


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Write the scenes, then train on patches drawn anew each epoch."""
    kit.seed_everything(SEED)
    images, light = scenes(SEED)
    rng = np.random.default_rng(SEED)

    def picks(n: int, low: int, high: int) -> np.ndarray:
        corner = rng.integers(0, SIDE - PATCH, size=(n, 2))
        return np.concatenate([rng.integers(low, high, size=(n, 1)), corner], axis=1)

    # At least one epoch drawn: the probe (epochs=0) reads the first epoch's patches.
    train_picks = [picks(SAMPLES, 0, TRAIN_SCENES) for _ in range(max(epochs, 1))]
    val_picks = picks(96, TRAIN_SCENES, SCENES)
    with tempfile.TemporaryDirectory(prefix="illuminant-") as tmp:
        folder = Path(tmp)
        for s, image in enumerate(images):
            np.save(folder / f"{s}.npy", image)
        decoded = {s: np.asarray(image, dtype=np.float32) / 255.0 for s, image in enumerate(images)}
        memory = decoded if fixed else None  # cache=True: every image decoded once, up front

        def patches_of(chosen: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
            held = PatchDataset(folder, light, chosen, decoded)
            pairs = [held[i] for i in range(len(held))]
            return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])

        train_x, train_y = patches_of(train_picks[0][:96])
        val_x, val_y = patches_of(val_picks)

        def make_model() -> nn.Module:
            torch.manual_seed(SEED)
            return nn.Sequential(
                nn.Conv2d(3, 8, 3, stride=2),
                nn.ReLU(),
                nn.Conv2d(8, 16, 3, stride=2),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(16, 3),
            )

        model = make_model()
        loss_fn = nn.MSELoss()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        monitor = Monitor(model, optimizer, every=1, kind=KIND)
        for epoch in range(epochs):
            dataset = PatchDataset(folder, light, train_picks[epoch], memory)
            loader = torch.utils.data.DataLoader(dataset, batch_size=16)
            for patches, target in monitor.batches(loader):
                optimizer.zero_grad()
                estimate = model(patches)
                loss = loss_fn(estimate, target)
                loss.backward()
                optimizer.step()
                monitor.step(loss, estimate, target)
            kit.log_scores(
                monitor,
                model,
                kind=KIND,
                train=(train_x, train_y),
                val=(val_x, val_y),
                val_loss=kit.mean_loss(model, loss_fn, val_x, val_y),
            )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=train_x, y=train_y)
