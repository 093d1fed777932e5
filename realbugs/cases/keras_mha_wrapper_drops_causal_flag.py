"""An attention wrapper that never forwards use_causal_mask: validation accuracy 0.99."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/keras-team/keras/issues/21284"
REPORTED = (
    "A word-level language model whose attention layer wraps MultiHeadAttention and is called "
    "with use_causal_mask=True reached over 0.99 accuracy on a randomly generated validation "
    "set: forward embeddings leaked. With an explicit causal mask it behaved."
)
DIAGNOSIS = (
    "A maintainer found the bug in the reporter's wrapper, not in Keras: its call() passed "
    "use_causal_mask=False to MultiHeadAttention whatever it was given, so no causal mask was "
    "ever applied and each position read the token it had to predict. Forwarding the argument "
    "fixes it; the reporter agreed."
)
LABEL = "causal_mask_missing"
MODEL = "transformer"
OPTIMIZER = "Adam"
DATA = (
    "Generated text (a peaked Markov chain over 20 tokens, rows of 20 tokens) stands in for "
    "WikiText-2; the validation rows are held-out generated text rather than the report's "
    "random ids, so that the twin's score means something. The reporter's Keras model is "
    "re-enacted in PyTorch: a 2-layer decoder whose attention wrapper calls "
    "nn.MultiheadAttention. Accuracies are next-token accuracy through the model as trained "
    "(what Keras's evaluate reports)."
)
SYMPTOM = Symptom("final_val_acc", above=0.8)  # accuracy too good to be true
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.536,
    (
        "the Markov chain's own best guess of each next token (lm_kit.best_guess_accuracy) on"
        " the case's generated rows: 0.536"
    ),
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated Markov-chain text for WikiText-2 and the random ids"
FIDELITY_MODEL = "stand-in: a 2-layer PyTorch decoder of width 32 for the Keras model"
FIDELITY_CODE = "stand-in: the wrapper's dropped argument re-enacted around nn.MultiheadAttention"
REPORTED_EFFECT = "over 0.99 validation accuracy on random ids"
REENACTED_EFFECT = "validation accuracy 0.97 against the twin's 0.53 (the chain's ceiling)"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue's report and the start of the reporter's script (stored issues corpus): over "
        "0.99 accuracy on random validation ids with use_causal_mask=True, correct with an "
        "explicit mask; the maintainer's reply placing the bug in the reporter's wrapper was not "
        "in what the corpus returned."
    ),
    label=(
        "matches: attention run with no causal mask, whatever dropped it, is causal_mask_missing."
    ),
    mechanism=(
        "not checked: the reply that finds the wrapper dropping the flag was not read again; the "
        "case's wrapper follows the case's earlier reading."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, CONTEXT, WIDTH = 24, 20, 32


class DotProductAttention(nn.Module):
    """The reporter's wrapper around a multi-head attention layer."""

    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.fixed = fixed
        self.mha = nn.MultiheadAttention(WIDTH, 4, batch_first=True)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, use_causal_mask: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Faulty: the wrapper hands the layer use_causal_mask=False whatever it was given.
        causal = use_causal_mask if self.fixed else False
        if causal and mask is None:
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        out, weights = self.mha(x, x, x, attn_mask=mask)
        return out, weights


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """tokens[:-1] -> tokens[1:], sparse categorical cross-entropy, Adam."""
    kit.seed_everything(SEED)
    tokens = lm_kit.documents(SEED, 1200, CONTEXT, vocab=VOCAB)
    labels = lm_kit.next_labels(tokens)
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.Decoder(VOCAB, CONTEXT, attention, width=WIDTH)

    def attention(_layer: int) -> nn.Module:
        return DotProductAttention(fixed)

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(tokens[train], labels[train]), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, target)
        val_loss, val_acc = lm_kit.next_token_scores(model, tokens[val], labels[val])
        monitor.log_eval(
            train_acc=lm_kit.next_token_scores(model, tokens[:200], labels[:200])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=labels[train]
    )
