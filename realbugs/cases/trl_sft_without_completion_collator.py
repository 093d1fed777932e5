"""SFTTrainer on an instruction dataset without the completion-only collator: the loss covered
the prompt as well as the completion."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/huggingface/trl/issues/1507"
REPORTED = (
    "Reading the tutorial, a user took an instruction-following dataset format to be enough "
    "for SFTTrainer to compute the loss on the completions only; the code showed that without "
    "DataCollatorForCompletionOnlyLM the language-modeling collator is used and the prompt "
    "counts too. Others had the same question."
)
DIAGNOSIS = (
    "A maintainer confirmed that the dataset format alone does not mask the prompt: "
    "DataCollatorForCompletionOnlyLM must be passed explicitly to train on completions only; "
    "otherwise every prompt token is in the loss."
)
LABEL = "unmasked_loss"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated instruction pairs (a prompt of 6 to 9 random tokens and a separator, the "
    "completion its first and last tokens through a fixed substitution, then <eos>), "
    "right-padded to 24 tokens, padding -100 in both forms as the collator does; the toy "
    "nanoGPT-sized decoder (2 layers, width 32) stands in for the user's model. Accuracies "
    "are the exact match of greedy decoding from the prompt. No run was reported: the symptom "
    "is the suite's choice, the completions' exact match."
)
SYMPTOM = Symptom("final_val_acc", below=0.1)  # the completions are not learned
SEED = 1
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    1.0,
    (
        "exact match of answers that a fixed rule writes from the prompt (its ends through a "
        "fixed substitution): 1.0 by construction"
    ),
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated long prompts and two-token completions"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder"
FIDELITY_CODE = "stand-in: our loop; the two collators' labels re-enacted"
REPORTED_EFFECT = "none given: the prompt counted in the loss (read in the code)"
REENACTED_EFFECT = "greedy exact match 0.00 against the twin's 0.98 after 128 steps"
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): without DataCollatorForCompletionOnlyLM the "
        "language-modeling collator is used and the loss counts prompt and completion; a "
        "maintainer confirmed the collator must be passed explicitly."
    ),
    label="matches: a loss that counts the prompt is unmasked_loss.",
    mechanism=(
        "matches: the prompt's labels kept, the twin masks them as the completion-only collator "
        "does."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, WIDTH = 24, 24


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """SFT: the collator's labels, the shifted next-token loss, AdamW."""
    kit.seed_everything(SEED)
    pairs = lm_kit.pairs(SEED, 1200, vocab=VOCAB, width=WIDTH, words=(6, 9), rule="ends")
    position = torch.arange(WIDTH)[None, :]
    if fixed:  # DataCollatorForCompletionOnlyLM: the prompt and the padding are -100
        ignored = (position < pairs.prompt[:, None]) | (position >= pairs.length[:, None])
    else:  # DataCollatorForLanguageModeling: only the padding is -100
        ignored = position >= pairs.length[:, None]
    labels = pairs.tokens.masked_fill(ignored, lm_kit.IGNORE)
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        shifted = lm_kit.next_labels(target)
        return F.cross_entropy(logits.reshape(-1, VOCAB), shifted.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, WIDTH)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    mask = pairs.attention_mask
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
