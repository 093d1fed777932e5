"""A causal transformer decoder trained without a causal mask copies the future: terrible at
inference."""

import numpy as np
import torch
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit
from faultbench.realbugs.case import AUDITED_BEFORE

SOURCE = "https://github.com/alex-matton/causal-transformer-decoder/issues/1"
REPORTED = (
    "There is no way to pass the causal target mask during training; trained without it, the "
    "model's performance is terrible, as if it learned to copy the future tokens."
)
DIAGNOSIS = (
    "Without a causal mask every position attends to the tokens after it, including the one "
    "it must predict, so training teaches copying that inference cannot use; the maintainer "
    "added masked training ('it now trains like a regular transformer')."
)
LABEL = "causal_mask_missing"  # a known fault since the language-model tasks (was other_fault)
MODEL = "transformer"
OPTIMIZER = "Adam"
DATA = (
    "Generated token sequences from a small Markov chain (16 tokens, length 16) stand in for "
    "the user's targets; a 2-layer nn.TransformerEncoder used as a decoder-only language "
    "model. Validation measures next-token accuracy with the causal mask, as at inference."
)
SYMPTOM = Symptom("train_val_gap", above=0.2)  # copies in training, cannot at inference
SEED = 0
KIND = "next_token"
REFERENCE = Reference(
    0.37,
    ("the chain's own best guess (each token's most likely successor) on the validation sequences"),
)
FIDELITY_DATA = "stand-in: a 16-token Markov chain for the user's targets"
FIDELITY_MODEL = "stand-in: a 2-layer nn.TransformerEncoder used as a decoder"
FIDELITY_CODE = "stand-in: a plain teacher-forcing loop with Adam at 1e-3"
REPORTED_EFFECT = (
    "none given: the trained model performs 'terribly', as if it learned to copy the future tokens"
)
REENACTED_EFFECT = (
    "next-token accuracy 0.497 in training against 0.234 at inference (gap 0.26); the twin "
    "reaches 0.368 of the chain's best 0.370"
)
OBSERVED = True
SOURCE_CHECK = AUDITED_BEFORE  # issue 40's audit; not read again in issue 51
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
EPOCHS = 6
VOCAB, LENGTH, WIDTH = 16, 16, 32


def sequences(seed: int, n: int) -> torch.Tensor:
    """Token sequences from a peaked Markov chain."""
    rng = np.random.default_rng(seed)
    transition = rng.dirichlet(np.full(VOCAB, 0.2), size=VOCAB)
    out = np.zeros((n, LENGTH), dtype=np.int64)
    out[:, 0] = rng.integers(0, VOCAB, size=n)
    for t in range(1, LENGTH):
        out[:, t] = [rng.choice(VOCAB, p=transition[s]) for s in out[:, t - 1]]
    return torch.from_numpy(out)


class Decoder(nn.Module):
    """Embeddings, a transformer stack, next-token scores; the mask is the caller's."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.zeros(1, LENGTH - 1, WIDTH))
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 64, dropout=0.0, batch_first=True)
        self.layers = nn.TransformerEncoder(layer, num_layers=2)
        self.out = nn.Linear(WIDTH, VOCAB)
        self.causal_in_training = True

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tokens.size(1))
        use_mask = self.causal_in_training or not self.training
        return self.out(
            self.layers(self.embed(tokens) + self.position, mask=causal if use_mask else None)
        )


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Teacher forcing on (tokens[:-1] -> tokens[1:]); train accuracy as trained, val as at
    inference."""
    kit.seed_everything(SEED)
    data = sequences(SEED, 1200)
    x, y = data[:, :-1], data[:, 1:]
    train_x, train_y, val_x, val_y = x[:1000], y[:1000], x[1000:], y[1000:]

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        decoder = Decoder()
        decoder.causal_in_training = fixed
        return decoder

    def loss_fn(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(scores.reshape(-1, VOCAB), target.reshape(-1))

    def accuracy(inputs: torch.Tensor, target: torch.Tensor, *, training: bool) -> float:
        model.train(training)
        hits = kit.accuracy(model, inputs, target)
        model.train()
        return hits

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(train_x, train_y), 32)
    monitor = Monitor(model, optimizer, every=1)
    for _epoch in range(epochs):
        for inputs, target in monitor.batches(loader):
            optimizer.zero_grad()
            scores = model(inputs)
            loss = loss_fn(scores, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, scores, target)
        monitor.log_eval(
            train_acc=accuracy(train_x, train_y, training=True),
            val_acc=accuracy(val_x, val_y, training=False),
        )
    return kit.finish(monitor, make_model=make_model, loss_fn=loss_fn, X=train_x, y=train_y)
