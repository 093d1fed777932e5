"""M2M100's FlashAttention-2 path kept its attention dropout in evaluation mode: evaluation
was noisy and worse than the model."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = (
    "https://github.com/OrderLab/TrainCheck-Evaluation-Workloads/blob/main/"
    "silent-issue-detection/bug-reprod-scripts/transformers-33844/README.md"
)
REPORTED = (
    "With M2M100's FlashAttention-2 attention, model.eval() followed by repeated inference "
    "on the same input gave different outputs: dropout stayed active in evaluation, making "
    "outputs nondeterministic and degrading quality (transformers pull request 33844, as "
    "TrainCheck's evaluation describes it)."
)
DIAGNOSIS = (
    "M2M100FlashAttention2 passed its dropout rate to the attention kernel whatever "
    "self.training said (an implementation copied from BART's into many models); the fix "
    "passes 0.0 when the module is not training."
)
LABEL = "other_fault"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated instructions (a prompt of 2 to 4 tokens and a separator, the answer its "
    "substitution) stand in for translation pairs, and a 2-layer decoder of width 32 whose "
    "attention applies dropout 0.5 to its weights, as the FlashAttention-2 path's kernel "
    "does, for M2M100. Accuracies are the exact match of greedy decoding in evaluation "
    "mode, as inference runs. The report names the inconsistency; the symptom is the "
    "suite's choice, the evaluated score below the trained model's."
)
SYMPTOM = Symptom("final_val_acc", below=0.88)  # evaluation runs with dropout
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    1.0,
    (
        "exact match of answers that a fixed rule writes from the prompt (a fixed "
        "substitution): 1.0 by construction"
    ),
)
EPOCHS = 5
FIDELITY_DATA = "stand-in: generated instruction pairs for translation pairs"
FIDELITY_MODEL = "stand-in: a 2-layer decoder (dropout 0.5) for M2M100-418M"
FIDELITY_CODE = "stand-in: our attention; the dropout rate passed whatever self.training is"
REPORTED_EFFECT = "none given: nondeterministic outputs and worse quality in evaluation"
REENACTED_EFFECT = "exact match 0.76 in evaluation against the twin's 1.00"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "TrainCheck's evaluation README for the pull request (stored code index): "
        "M2M100FlashAttention2 kept its dropout in eval mode, outputs nondeterministic and "
        "degraded; the fix passes 0.0 when not training; the pull request itself was not read."
    ),
    label=(
        "matches: dropout left on while the model is scored is the registry's held-out "
        "dropout_at_eval, whose answer is other_fault (a case carries only a known label or "
        "other_fault)."
    ),
    mechanism=(
        "matches: the attention's dropout rate passed whatever the mode, the twin 0.0 in "
        "evaluation."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, CONTEXT, WIDTH, HEADS, ATTENTION_DROPOUT = 24, 16, 32, 4, 0.5


class FlashAttention2(nn.Module):
    """Causal self-attention whose weights get dropout inside the 'kernel'."""

    def __init__(self, fixed: bool) -> None:
        super().__init__()
        self.fixed = fixed
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, t, _ = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(WIDTH // HEADS)
        weights = scores.masked_fill(future, float("-inf")).softmax(-1)
        # Faulty: the rate handed to the kernel whatever the mode; fixed: 0.0 in evaluation.
        rate = ATTENTION_DROPOUT if (self.training or not self.fixed) else 0.0
        dropped = F.dropout(weights, rate, training=True)
        return self.proj((dropped @ v).transpose(1, 2).reshape(n, t, WIDTH)), weights


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Answer-only next-token loss, AdamW; greedy decoding in eval mode."""
    kit.seed_everything(SEED)
    pairs = lm_kit.pairs(SEED, 1200, vocab=VOCAB, width=CONTEXT, words=(2, 4), rule="map")
    labels = lm_kit.answer_labels(pairs)
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def attention(_layer: int) -> nn.Module:
        return FlashAttention2(fixed)

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.Decoder(VOCAB, CONTEXT, attention, width=WIDTH)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(pairs.tokens[train], labels[train]), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, target)
        monitor.log_eval(
            train_acc=lm_kit.exact_match(model, pairs.rows(slice(0, 100))),
            val_acc=lm_kit.exact_match(model, pairs.rows(val)),
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=pairs.tokens[train], y=labels[train]
    )
