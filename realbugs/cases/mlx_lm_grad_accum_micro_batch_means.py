"""mlx-lm's accumulation divided the sum of micro-batch token means by the steps: short
examples outweighed long ones."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/ml-explore/mlx-lm/pull/1544"
REPORTED = (
    "Reading the LoRA trainer: the default loss returns each micro-batch's mean over its own "
    "tokens, and with gradient accumulation the step summed the micro-batch gradients and "
    "divided by the fixed number of accumulation steps."
)
DIAGNOSIS = (
    "Unless every micro-batch has as many trained tokens, that is not the gradient of the "
    "token mean over the accumulated batch: the update is biased toward shorter examples and "
    "depends on how examples fall into micro-batches (which the trainer groups by length), "
    "while the evaluation already weighted by tokens. The proposed fix keeps a running "
    "token-weighted mean of the gradient over the accumulation window."
)
LABEL = "loss_normalization"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated instruction data: 80% short replies (a 1-2 token prompt, one unpredictable "
    "reply token) and 20% long formulaic answers (a 5-6 token prompt, its substitution); "
    "accumulation windows of 32 examples in 8 micro-batches of 4, grouped by length as the "
    "trainer batches them; the toy nanoGPT-sized decoder (2 layers, width 32) stands in for "
    "the model being fine-tuned. The validation loss and accuracy are per answer token. The "
    "pull request reports no run: the symptom is the suite's choice, the validation loss."
)
SYMPTOM = Symptom("final_val_loss", above=1.28)  # the long answers are learned late
SEED = 2
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.681,
    "every validation answer token right but the short replies' unpredictable one: 0.681",
)
EPOCHS = 7
FIDELITY_DATA = "stand-in: generated short noisy replies and long formulaic answers"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder"
FIDELITY_CODE = "stand-in: our loop; the micro-batch token means averaged over the window"
REPORTED_EFFECT = "none given: a biased update found by reading the code"
REENACTED_EFFECT = "validation loss 1.42, token accuracy 0.60; the twin's 1.15 and 0.66"
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the pull request's description (stored issues corpus, and its predecessor 1413): "
        "per-micro-batch token means summed and divided by a fixed count bias the update toward "
        "short examples; the fix keeps a token-weighted mean; the pull request is closed, not "
        "merged."
    ),
    label="matches: losses normalized per batch, not per token, is loss_normalization.",
    mechanism=(
        "matches: the mean of micro-batch means against the token-weighted mean over the window."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, WIDTH, MICRO = 24, 24, 4


def replies(seed: int, n: int) -> lm_kit.Pairs:
    """Short unpredictable replies mixed with long formulaic answers."""
    short = lm_kit.pairs(seed, n, vocab=VOCAB, width=WIDTH, words=(1, 2), rule="noise")
    long = lm_kit.pairs(seed + 1, n, vocab=VOCAB, width=WIDTH, words=(5, 6), rule="map")
    return lm_kit.mixed(short, long, share=0.8, seed=seed + 2)


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """One forward of the effective batch, its loss as the accumulation computes it."""
    kit.seed_everything(SEED)
    pairs = replies(SEED, 1200)
    labels = lm_kit.answer_labels(pairs)
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        per_token = F.cross_entropy(
            logits.reshape(-1, VOCAB), target.reshape(-1), reduction="none"
        ).view_as(target)
        counted = (target != lm_kit.IGNORE).sum(1)
        if fixed:  # the token-weighted mean over the whole window
            return per_token.sum() / counted.sum()
        # micro-batches of examples of similar length, each its own token mean, their sum
        # divided by the number of accumulation steps
        by_length = counted.argsort()
        sums = per_token.sum(1)[by_length].view(-1, MICRO).sum(1)
        tokens = counted[by_length].view(-1, MICRO).sum(1)
        return (sums / tokens).mean()

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, WIDTH)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(pairs.tokens[train], labels[train]), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()  # the same gradient as a backward per micro-batch
            optimizer.step()
            monitor.step(loss, logits, target)
        val_loss, val_acc = lm_kit.next_token_scores(model, pairs.tokens[val], labels[val])
        monitor.log_eval(
            train_acc=lm_kit.next_token_scores(model, pairs.tokens[:200], labels[:200])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=pairs.tokens[train], y=labels[train]
    )
