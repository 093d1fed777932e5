"""An nn.Transformer fed the very targets it is scored on learns to copy: no inference possible."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://discuss.pytorch.org/t/nn-transformer-explaination/53175/20"
REPORTED = (
    "A character-level nn.Transformer only copied its results: it learned very quickly, even "
    "with masks, and no generation was possible at inference."
)
DIAGNOSIS = (
    "The decoder was given the targets and the loss compared its output with those same "
    "targets, so each position was asked to reproduce the token it reads (an auto-encoder), "
    "which the decoder learns at once. The reporter's fix: a start token before and an end "
    "token after every target, and the loss against the target shifted left by one (teacher "
    "forcing), so position t predicts token t + 1."
)
LABEL = "labels_not_shifted"
MODEL = "transformer"
OPTIMIZER = "Adam"
DATA = (
    "Generated 'words' of 3 to 6 characters (18 letters) and a letter-by-letter substitution "
    "of them stand in for the reporter's character pairs; a 1+1-layer nn.Transformer of width "
    "32, the target's causal mask in both forms. Accuracies are the exact match of greedy "
    "decoding from the start token, as at inference."
)
SYMPTOM = Symptom("final_val_acc", below=0.2)  # no inference possible
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    1.0,
    "exact match of a letter-by-letter substitution, a fixed rule: 1.0 by construction",
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated words and a letter substitution of them"
FIDELITY_MODEL = "stand-in: nn.Transformer, 1 encoder and 1 decoder layer, width 32"
FIDELITY_CODE = "stand-in: our loop; decoder input = the loss's target, as the reporter wrote"
REPORTED_EFFECT = "none given: learns to copy very quickly; inference impossible"
REENACTED_EFFECT = "greedy exact match 0.00 against the twin's 1.00; training loss 0.04 in both"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "not read: the stored pages corpus returned no copy of the forum thread (searched for the"
        " thread's title and its symptom, a Transformer that only copies and cannot generate); "
        "the case's texts are from when it was written."
    ),
    label=(
        "not checked: the thread could not be read again; by the case's own diagnosis (the loss "
        "compares the decoder's output with the very targets it reads) the registry's "
        "labels_not_shifted fits."
    ),
    mechanism="not checked: the thread could not be read again.",
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, SOURCE_WIDTH, TARGET_WIDTH, WIDTH = 21, 6, 7, 32


def words(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(source chars padded to 6, target = the chars through a fixed substitution + <eos>,
    padded to 7)."""
    rng = np.random.default_rng(seed)
    cipher = rng.permutation(VOCAB - lm_kit.FIRST) + lm_kit.FIRST
    src = np.full((n, SOURCE_WIDTH), lm_kit.PAD, dtype=np.int64)
    tgt = np.full((n, TARGET_WIDTH), lm_kit.PAD, dtype=np.int64)
    for row in range(n):
        chars = rng.integers(lm_kit.FIRST, VOCAB, size=int(rng.integers(3, 7)))
        src[row, : len(chars)] = chars
        tgt[row, : len(chars) + 1] = [*cipher[chars - lm_kit.FIRST], lm_kit.EOS]
    return torch.from_numpy(src), torch.from_numpy(tgt)


class Translator(nn.Module):
    """Embeddings, nn.Transformer, output layer; one packed input (source, decoder input)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.randn(1, TARGET_WIDTH, WIDTH))
        self.core = nn.Transformer(WIDTH, 4, 1, 1, 64, dropout=0.0, batch_first=True)
        self.out = nn.Linear(WIDTH, VOCAB)

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        src, tgt = packed[:, :SOURCE_WIDTH], packed[:, SOURCE_WIDTH:]
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        hidden = self.core(
            self.embed(src) + self.position[:, :SOURCE_WIDTH],
            self.embed(tgt) + self.position[:, : tgt.shape[1]],
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=src == lm_kit.PAD,
            memory_key_padding_mask=src == lm_kit.PAD,
        )
        return self.out(hidden)


@torch.no_grad()
def greedy_exact(model: nn.Module, src: torch.Tensor, tgt: torch.Tensor) -> float:
    """Share of rows whose greedy decoding from <bos> writes the target up to its <eos>."""
    model.eval()
    ys = torch.full((len(src), 1), lm_kit.BOS)
    for _ in range(TARGET_WIDTH):
        logits = model(torch.cat([src, ys], 1))
        ys = torch.cat([ys, logits[:, -1].argmax(-1, keepdim=True)], 1)
    model.train()
    wrote = ys[:, 1:]
    real = tgt != lm_kit.PAD
    return float(((wrote == tgt) | ~real).all(1).float().mean())


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Adam, cross-entropy over the target characters (padding ignored)."""
    kit.seed_everything(SEED)
    src, tgt = words(SEED, 1200)
    if fixed:  # teacher forcing: <bos> then the target, each position predicts the next
        decoder_in = torch.cat([torch.full_like(tgt[:, :1], lm_kit.BOS), tgt[:, :-1]], 1)
    else:  # the decoder reads the very tokens it is scored on
        decoder_in = tgt
    packed = torch.cat([src, decoder_in], 1)
    labels = tgt.masked_fill(tgt == lm_kit.PAD, lm_kit.IGNORE)
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return Translator()

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(packed[train], labels[train]), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for inputs, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(inputs)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, target)
        monitor.log_eval(
            train_acc=greedy_exact(model, src[:200], tgt[:200]),
            val_acc=greedy_exact(model, src[val], tgt[val]),
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=packed[train], y=labels[train]
    )
