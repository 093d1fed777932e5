"""prompt2model fine-tuned GPT-2 with labels = input_ids: the instruction and the example's
input were trained on as much as the label."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/neulab/prompt2model/pull/167"
REPORTED = (
    "For autoregressive models the trainer's labels were the whole tokenized input, '<task> "
    "instruction Example: input Label: output<eos>', so the loss was computed over the "
    "instruction and the example's input as well as the output."
)
DIAGNOSIS = (
    "In teacher-forced fine-tuning only the output and its end token should count; the prompt "
    "part's labels must be -100, which GPT-2's loss ignores. The merged fix masks them, so "
    "the model is trained to write the label given the prompt instead of to model the prompt."
)
LABEL = "unmasked_loss"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated examples (a prompt of 6 to 9 random tokens and a separator standing for "
    "'Label:', the output its first and last tokens through a fixed substitution, then "
    "<eos>), right-padded to 24 tokens (padding -100 in both forms), stand in for "
    "prompt2model's generated datasets; the toy nanoGPT-sized decoder (2 layers, width 32, "
    "GPT-2's design) for GPT-2. Accuracies are the exact match of greedy decoding from the "
    "prompt. The pull request reports no run: the symptom is the suite's choice, the answers' "
    "exact match."
)
SYMPTOM = Symptom("final_val_acc", below=0.1)  # the outputs are not learned
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    1.0,
    (
        "exact match of answers that a fixed rule writes from the prompt (its ends through a "
        "fixed substitution): 1.0 by construction"
    ),
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated long prompts and two-token outputs"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder (GPT-2's design) for GPT-2"
FIDELITY_CODE = "stand-in: our loop; labels = input_ids with only the padding masked"
REPORTED_EFFECT = "none given: the loss covers the prompt (found by reading the code)"
REENACTED_EFFECT = "greedy exact match 0.00 against the twin's 1.00 after 128 steps"
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the merged pull request's description and issue 168 (stored issues corpus): for the "
        "autoregressive model the input is '<task> instruction Example: input Label: "
        "output<eos>', only the output and its end token should count, the rest labelled -100."
    ),
    label="matches: a loss that counts the prompt is unmasked_loss.",
    mechanism=(
        "matches: labels equal to the ids with only the padding masked, the twin masks the prompt"
        " too."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, WIDTH = 24, 24


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The trainer's loop: labels aligned with input_ids, the shifted loss, AdamW."""
    kit.seed_everything(SEED)
    pairs = lm_kit.pairs(SEED, 1200, vocab=VOCAB, width=WIDTH, words=(6, 9), rule="ends")
    position = torch.arange(WIDTH)[None, :]
    ignored = position >= pairs.length[:, None]  # the padding
    if fixed:  # the fix: the prompt's labels are -100 too
        ignored |= position < pairs.prompt[:, None]
    labels = pairs.tokens.masked_fill(ignored, lm_kit.IGNORE)
    mask = pairs.attention_mask
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        shifted = lm_kit.next_labels(target)  # GPT-2's loss shifts them
        return F.cross_entropy(logits.reshape(-1, VOCAB), shifted.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, WIDTH)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.utils.data.TensorDataset(pairs.tokens[train], mask[train], labels[train])
    loader = kit.batches_of(data, 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, attention, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, lm_kit.next_labels(target), mask=attention)
        monitor.log_eval(
            train_acc=lm_kit.exact_match(model, pairs.rows(slice(0, 100))),
            val_acc=lm_kit.exact_match(model, pairs.rows(val)),
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=pairs.tokens[train], y=labels[train]
    )
