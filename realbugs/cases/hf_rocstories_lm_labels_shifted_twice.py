"""The RocStories example shifted the LM labels while preprocessing, and the model shifted
them again: each position was trained on the token two ahead."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/huggingface/transformers/pull/562"
REPORTED = (
    "The RocStories fine-tuning example shifted the language-modeling labels by one during "
    "preprocessing although the model's forward pass shifts them too (raised in "
    "pytorch-pretrained-BERT issue 473)."
)
DIAGNOSIS = (
    "With both shifts the i-th logits were scored against token i+2, so the language-model "
    "head was trained to skip a token; the merged fix removes the shift from the "
    "preprocessing and leaves the one inside the model."
)
LABEL = "other_fault"
MODEL = "transformer"
OPTIMIZER = "Adam"
DATA = (
    "Generated stories (a peaked Markov chain over 20 tokens, rows of 20 tokens) stand in "
    "for RocStories, the toy nanoGPT-sized decoder (2 layers, width 32) for OpenAI GPT, "
    "the language-modeling loss only (the example's multiple-choice head is left out). "
    "Accuracies are next-token accuracy, shifted once as generation uses the model. The "
    "pull request reports no run: the symptom is the suite's choice."
)
SYMPTOM = Symptom("final_val_acc", below=0.3)  # the next token is not what was learned
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
FIDELITY_DATA = "stand-in: generated Markov-chain stories for RocStories"
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder for OpenAI GPT"
FIDELITY_CODE = "stand-in: our loop; a shift in preprocessing and one in the loss"
REPORTED_EFFECT = "none given: the labels shifted twice (read in the code)"
REENACTED_EFFECT = "next-token accuracy 0.04 against the twin's 0.52"
OBSERVED = False
SOURCE_CHECK = SourceCheck(
    read=(
        "the merged pull request's description (stored issues corpus): the RocStories "
        "preprocessing shifted the LM labels although the model's forward shifts them too "
        "(pytorch-pretrained-BERT issue 473, not read)."
    ),
    label=(
        "matches: labels shifted twice train the head to skip a token; labels_not_shifted is the "
        "opposite bug (copying), so none of the known labels: other_fault."
    ),
    mechanism=(
        "matches: a shift in preprocessing and one in the loss; the twin drops the "
        "preprocessing's, on a stand-in decoder."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, CONTEXT = 24, 20


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The model's loss shifts its labels once; the preprocessing may have already."""
    kit.seed_everything(SEED)
    stories = lm_kit.documents(SEED, 1200, CONTEXT, vocab=VOCAB)
    # The preprocessing's lm_labels: the stories as they are, or shifted by one already.
    lm_labels = stories.clone() if fixed else lm_kit.next_labels(stories)
    train, val = slice(0, 1000), slice(1000, None)
    once = lm_kit.next_labels(stories)  # what generation needs: position t -> token t + 1

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        shifted = lm_kit.next_labels(target)  # the shift inside the model
        return F.cross_entropy(logits.reshape(-1, VOCAB), shifted.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, CONTEXT)

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(stories[train], lm_labels[train]), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            monitor.step(loss, logits, lm_kit.next_labels(target))
        val_loss, val_acc = lm_kit.next_token_scores(model, stories[val], once[val])
        monitor.log_eval(
            train_acc=lm_kit.next_token_scores(model, stories[:200], once[:200])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=stories[train], y=lm_labels[train]
    )
