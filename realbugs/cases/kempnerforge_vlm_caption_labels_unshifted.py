"""A captioning decoder scored each text position against its own, visible token: loss -> 0."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/KempnerInstitute/KempnerForge/issues/154"
REPORTED = (
    "Training the vision-language captioning models, the loss fell from 8.6 to 0.0015 by step "
    "380 and to 0.0000 by step 980, gradient norm near 0, with no error."
)
DIAGNOSIS = (
    "The captioning path made the labels equal to the input ids at the same positions and the "
    "loss did not shift them, while the model returns logits over the text positions: each "
    "logit was scored against the token it already sees, so the model learned to copy it. "
    "Text pretraining shifted its labels; the captioning path did not. The fix shifts them."
)
LABEL = "labels_not_shifted"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated image-caption pairs: an 'image' is 4 patch vectors (16 features) of one of 12 "
    "scenes plus noise, its caption 10 tokens of a Markov chain whose first token is the "
    "scene's. A 2-layer causal transformer reads the patches then the caption, as a joint "
    "decoder does, and scores the text positions. Accuracies are next-token accuracy on the "
    "captions, shifted as captioning at inference uses the model."
)
SYMPTOM = Symptom("min_loss", below=0.1)  # the reported collapse of the loss to ~0
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.507,
    (
        "the caption chain's own best guess of each next token (lm_kit.best_guess_accuracy) "
        "on the validation captions, the scene's token first: 0.507"
    ),
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated patch vectors and Markov-chain captions"
FIDELITY_MODEL = "stand-in: a 2-layer joint decoder of width 32 for the Qwen3-0.6B VLM"
FIDELITY_CODE = "stand-in: our loop; labels = input_ids and an unshifted loss, as reported"
REPORTED_EFFECT = "loss 8.6 -> 0.0015 at step 380 -> 0.0000 at step 980"
REENACTED_EFFECT = "loss falls to 0.03 against the twin's floor of 1.48"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue and the fix's pull request 155 (stored issues corpus): labels[i] == "
        "input_ids[i] and an unshifted loss, the loss 8.6 to 0.0015 by step 380 and 0 by 980; the"
        " fix emits next-token labels."
    ),
    label="matches: each logit scored against the token it sees is labels_not_shifted.",
    mechanism=(
        "matches: labels equal to the ids with an unshifted loss, the twin shifts them, on a "
        "small joint decoder."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, CAPTION, PATCHES, FEATURES, SCENES, WIDTH = 24, 10, 4, 16, 12, 32


def captions(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(patches (n, PATCHES, FEATURES), caption ids (n, CAPTION)): each caption starts with
    its scene's token and continues along a Markov chain."""
    rng = np.random.default_rng(seed)
    scene = rng.integers(0, SCENES, size=n)
    looks = rng.normal(size=(SCENES, PATCHES, FEATURES))
    patches = looks[scene] + 0.3 * rng.normal(size=(n, PATCHES, FEATURES))
    text = lm_kit.documents(seed + 1, n, CAPTION, vocab=VOCAB)
    text[:, 0] = torch.from_numpy(scene + lm_kit.FIRST)
    return torch.from_numpy(patches.astype(np.float32)), text


class Captioner(nn.Module):
    """Patches, then caption tokens, through one causal stack; logits over the text only."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Linear(FEATURES, WIDTH)
        self.token = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.zeros(1, PATCHES + CAPTION, WIDTH))
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 64, dropout=0.0, batch_first=True)
        self.stack = nn.TransformerEncoder(layer, num_layers=2)
        self.out = nn.Linear(WIDTH, VOCAB)

    def forward(self, patches: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.patch(patches), self.token(ids)], 1) + self.position
        causal = nn.Transformer.generate_square_subsequent_mask(h.shape[1])
        return self.out(self.stack(h, mask=causal, is_causal=True)[:, PATCHES:])


class Pair(nn.Module):
    """The captioner on one packed tensor, as the probe feeds a model one input."""

    def __init__(self) -> None:
        super().__init__()
        self.captioner = Captioner()

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        patches = packed[:, : PATCHES * FEATURES].reshape(-1, PATCHES, FEATURES)
        return self.captioner(patches, packed[:, PATCHES * FEATURES :].long())


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """AdamW with warmup-free constant rate; labels are the caption ids themselves."""
    kit.seed_everything(SEED)
    patches, text = captions(SEED, 1200)
    packed = torch.cat([patches.flatten(1), text.float()], 1)
    labels = text.clone()  # `_tokenize_and_mask`: labels[i] == input_ids[i]
    train, val = slice(0, 1000), slice(1000, None)

    def aligned(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if fixed:  # as text pretraining does: position t is scored against token t + 1
            return logits[:, :-1], target[:, 1:]
        return logits, target  # each text position against its own token

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, goal = aligned(logits, target)
        return F.cross_entropy(scores.reshape(-1, VOCAB), goal.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return Pair()

    def task_scores(rows: slice) -> tuple[float, float]:
        return lm_kit.next_token_scores(model, packed[rows], lm_kit.next_labels(text[rows]))

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(packed[train], labels[train]), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for inputs, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(inputs)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, *aligned(logits, target))
        val_loss, val_acc = task_scores(val)
        monitor.log_eval(
            train_acc=task_scores(slice(0, 200))[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=packed[train], y=labels[train]
    )
