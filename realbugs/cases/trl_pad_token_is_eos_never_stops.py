"""With pad_token set to eos_token, the completion-only collator masked every end token: the
fine-tuned model rarely, if ever, stopped."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/huggingface/trl/issues/976"
REPORTED = (
    "Mistral fine-tuned with DataCollatorForCompletionOnlyLM, its pad token set to the end "
    "token (Mistral has none), rarely if ever generated the end token </s>."
)
DIAGNOSIS = (
    "The collator inherits from the language-modeling collator, which labels every position "
    "holding the pad id -100; with pad_token_id equal to eos_token_id that includes each "
    "answer's own end token, so the model is never taught to end an answer. A pad token "
    "distinct from the end token (or a collator that keeps the end token's label) fixes it."
)
LABEL = "other_fault"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated instructions (a prompt of 2 to 5 tokens and a separator, the answer its "
    "substitution, then the end token), padded to 16 tokens with the end token (faulty) or "
    "a pad token of its own (fixed), the prompt labelled -100 in both; the toy "
    "nanoGPT-sized decoder (2 layers, width 32) stands in for Mistral. Accuracies are the "
    "exact match of greedy decoding, the end token included."
)
SYMPTOM = Symptom("final_val_acc", below=0.2)  # the answers never end
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    1.0,
    (
        "exact match of answers that a fixed rule writes from the prompt (a fixed "
        "substitution): 1.0 by construction"
    ),
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated instruction pairs"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder for Mistral-7B"
FIDELITY_CODE = "stand-in: our loop; the collator's rule (labels -100 where id == pad id)"
REPORTED_EFFECT = "none given: the model rarely, if ever, generates the end token"
REENACTED_EFFECT = "exact match 0.00 (answers written, never ended) against the twin's 0.96"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue and pull requests 988 and 992 (stored issues corpus): with pad_token_id set to"
        " eos_token_id the collator labels every end token -100, so the model rarely if ever "
        "generates </s>; the fixes so far a warning and documentation."
    ),
    label=(
        "matches: a loss that wrongly ignores the end token is the opposite of unmasked_loss: "
        "other_fault."
    ),
    mechanism=(
        "matches: padding with the end token's id so the end token's labels are -100, the twin "
        "pads with a distinct id."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, WIDTH = 24, 16


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Completion-only labels from the collator, the shifted next-token loss, AdamW."""
    kit.seed_everything(SEED)
    pairs = lm_kit.pairs(SEED, 1200, vocab=VOCAB, width=WIDTH, words=(2, 5), rule="map")
    position = torch.arange(WIDTH)[None, :]
    padding = position >= pairs.length[:, None]
    pad_id = lm_kit.PAD if fixed else lm_kit.EOS  # faulty: tokenizer.pad_token = eos_token
    tokens = pairs.tokens.masked_fill(padding, pad_id)
    # The collator: every position holding the pad id is -100, and so is the prompt.
    ignored = (tokens == pad_id) | (position < pairs.prompt[:, None])
    labels = lm_kit.next_labels(tokens.masked_fill(ignored, lm_kit.IGNORE))
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, WIDTH)

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
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
        monitor.log_eval(
            train_acc=lm_kit.exact_match(model, pairs.rows(slice(0, 100))),
            val_acc=lm_kit.exact_match(model, pairs.rows(val)),
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=labels[train]
    )
