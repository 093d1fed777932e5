"""HVPNeT builds its optimizer from parameter groups and forgets the head's: crf and fc are not
trained."""

from typing import Any

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/zjunlp/HVPNeT/issues/5"
REPORTED = (
    "The parameters of the crf and fc layers are collected but never appended to the list "
    "handed to the optimizer, so they should not be trained."
)
DIAGNOSIS = (
    "The maintainers confirmed: without parameters.append(params) after collecting them, crf "
    "and fc are not trained; the fix appends them."
)
LABEL = "frozen_layer"
MODEL = "recurrent"
OPTIMIZER = "AdamW"
DATA = (
    "Generated tagged sentences (a 60-word vocabulary, tags depending on a word and its left "
    "neighbour) stand in for Twitter-2015 NER; a BiLSTM encoder stands in for BERT and the "
    "visual prefix, and a linear tag head for the CRF and fc."
)
SYMPTOM = Symptom("weight_change", below=1e-9, layer="fc")  # the head never moves
SEED = 0
KIND = "multiclass"
REFERENCE = Reference(
    1.0, "the rule that made the tags: each word's kind and its left neighbour's parity (1.000)"
)
FIDELITY_DATA = "stand-in: generated tagged sentences for Twitter-2015 NER"
FIDELITY_MODEL = "stand-in: a BiLSTM and a linear head for BERT, the visual prefix, the CRF and fc"
FIDELITY_CODE = "stand-in: a plain tagging loop with AdamW"
REPORTED_EFFECT = "none given: crf and fc are never trained (read from the code)"
REENACTED_EFFECT = (
    "the head changes by 0 (the twin's by 17 times its size); tag accuracy 0.994 against 1.000"
)
OBSERVED = False
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 5
VOCAB, TAGS, LENGTH = 60, 5, 12


def sentences(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Words, and tags that depend on the word and its left neighbour."""
    rng = np.random.default_rng(seed)
    words = rng.integers(0, VOCAB, size=(n, LENGTH))
    word_kind = rng.integers(0, TAGS, size=VOCAB)
    previous = np.concatenate([np.zeros((n, 1), dtype=int), words[:, :-1]], axis=1)
    return torch.from_numpy(words), torch.from_numpy((word_kind[words] + previous % 2) % TAGS)


class NERModel(nn.Module):
    """Encoder, then the tag head."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, 32)
        self.encoder = nn.LSTM(32, 32, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(64, TAGS)

    def forward(self, words: torch.Tensor) -> torch.Tensor:
        return self.fc(self.encoder(self.embeddings(words))[0])


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The trainer's grouped parameters, then the loop."""
    kit.seed_everything(SEED)
    words, tags = sentences(SEED, 1500)
    train_w, train_t, dev_w, dev_t = words[:1200], tags[:1200], words[1200:], tags[1200:]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return NERModel()

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, TAGS), target.reshape(-1))

    model = make_model()
    parameters = []
    params: dict[str, Any] = {"lr": 5e-3, "weight_decay": 1e-2}
    params["params"] = [p for n, p in model.named_parameters() if n.startswith("embeddings")]
    parameters.append(params)
    params = {"lr": 5e-3, "weight_decay": 1e-2}
    params["params"] = [p for n, p in model.named_parameters() if n.startswith("encoder")]
    parameters.append(params)
    params = {"lr": 5e-2, "weight_decay": 0.0}
    params["params"] = [p for n, p in model.named_parameters() if n.startswith("fc")]
    if fixed:
        parameters.append(params)
    optimizer = torch.optim.AdamW(parameters)
    loader = kit.batches_of(torch.utils.data.TensorDataset(train_w, train_t), 32)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for batch_w, batch_t in monitor.batches(loader):
            logits = model(batch_w)
            loss = loss_fn(logits, batch_t)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, batch_t)
        monitor.log_eval(
            train_acc=kit.accuracy(model, train_w, train_t),
            val_acc=kit.accuracy(model, dev_w, dev_t),
            val_loss=kit.mean_loss(model, loss_fn, dev_w, dev_t),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=train_w, y=train_t)
