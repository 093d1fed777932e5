"""parameter-golf's CaseOps preparation script started the training shards inside the
validation documents: 80% of them were trained on."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/openai/parameter-golf/issues/2127"
REPORTED = (
    "An audit of the record submissions found 15 of 34 with a systematic train/validation "
    "overlap: the claimed frontier's validation bits per byte (1.04350) beat the clean "
    "frontier's (1.05759) because 80% of the validation documents were also trained on."
)
DIAGNOSIS = (
    "The preparation script's defaults took the validation set from the first 50,000 "
    "documents of the stream but started the training shards at document 10,000, so documents "
    "10,000 to 49,999 were in both: the model partly memorized them and was scored on them as "
    "if held out. A disjoint partition, as in the canonical dataset's manifest, is the fix."
)
LABEL = "leaky_split"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "A stream of 30 generated documents (100 tokens of a Markov chain over 20 tokens each), "
    "cut into 20-token windows 4 apart: the first 10 are the validation documents, and the "
    "training shards start at document 2 (faulty, 80% of the validation documents inside) or "
    "at document 10 (fixed). The toy nanoGPT-sized decoder (2 layers, width 48) stands in for "
    "the challenge's small GPTs. The validation loss and accuracy are next-token ones on the "
    "validation documents (the loss in nats, not bits per byte)."
)
SYMPTOM = Symptom("final_val_loss", below=1.3)  # too good: the overlap is memorized
SEED = 1
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.552,
    (
        "the Markov chain's own best guess of each next token (lm_kit.best_guess_accuracy) on"
        " the case's generated rows: 0.552"
    ),
)
EPOCHS = 8
FIDELITY_DATA = "stand-in: generated Markov-chain documents for the CaseOps stream"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder for the record models"
FIDELITY_CODE = "stand-in: our loop; the shard start inside the validation documents"
REPORTED_EFFECT = "validation bpb 1.04350 (leaky) against 1.05759 (clean frontier)"
REENACTED_EFFECT = "validation loss 1.10 against the twin's 1.55"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus) and a leaderboard pull request citing it: the "
        "preparation script's default starts training at document 10,000 while validation is "
        "documents 0 to 49,999, so 80% of validation is trained on; 15 of 34 records leak, the "
        "clean frontier 1.05759 against the claimed 1.04350."
    ),
    label="matches: validation documents also trained on is leaky_split.",
    mechanism=(
        "matches: the training shards start inside the validation documents, the twin starts "
        "after them."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, DOCUMENTS, LENGTH, WINDOW, STRIDE, VALIDATION, LEAKY_START = 24, 30, 100, 20, 4, 10, 2


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Windows of the training shards, next-token loss, AdamW."""
    kit.seed_everything(SEED)
    stream = lm_kit.documents(SEED, DOCUMENTS, LENGTH, vocab=VOCAB, concentration=0.15)
    tokens, document = lm_kit.windows(stream, WINDOW, STRIDE)
    labels = lm_kit.next_labels(tokens)
    # The training shards start at this document: inside the validation set, or after it.
    first_train = VALIDATION if fixed else LEAKY_START
    rows = torch.nonzero(document >= first_train)[:, 0]
    train = rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(SEED))]
    val = torch.nonzero(document < VALIDATION)[:, 0]

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, WINDOW, width=48)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    data = torch.utils.data.TensorDataset(tokens[train], labels[train])
    loader = kit.batches_of(data, 32)
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
            train_acc=lm_kit.next_token_scores(model, tokens[train[:300]], labels[train[:300]])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=labels[train]
    )
