"""OpenRLHF's SFT template ended in a space that merged into the answer's first token, which
the prompt mask then covered: the model never learned to start an answer."""

import torch
import torch.nn.functional as F
from torch import nn

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/OpenRLHF/OpenRLHF/issues/705"
REPORTED = (
    "After SFT in the no-pretrain mode the model could not generate the answer from the "
    "input alone: it could not produce the answer's first word (the reporter was stuck on it "
    "for over ten days)."
)
DIAGNOSIS = (
    "The default input template 'User: {}\\nAssistant: ' ends with a space; tokenizing the "
    "whole sequence merges that space with the answer's first word into one token, while the "
    "prompt's length is counted on the prompt tokenized alone, so the label mask (-100 over "
    "the prompt's length) also covers the answer's first token, which is never trained. "
    "Applying the chat template (or counting the prompt within the full tokenization) fixes "
    "the boundary."
)
LABEL = "other_fault"
MODEL = "transformer"
OPTIMIZER = "Adam"
DATA = (
    "Generated instructions (a prompt of 2 to 5 tokens and a separator, the answer its "
    "substitution, then <eos>); the faulty form's prompt mask reaches one token into the "
    "answer, as the merged space made it; the toy nanoGPT-sized decoder (2 layers, width "
    "32) stands in for the model fine-tuned. Accuracies are the exact match of greedy "
    "decoding from the prompt."
)
SYMPTOM = Symptom("final_val_acc", below=0.2)  # no answer can start
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
FIDELITY_MODEL = "stand-in: a 2-layer nanoGPT-sized decoder"
FIDELITY_CODE = "stand-in: our loop; the prompt mask one token too long, as reported"
REPORTED_EFFECT = "none given: the model cannot generate the answer's first word from the input"
REENACTED_EFFECT = "exact match 0.06 against the twin's 0.96"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): the template's trailing space merges with the answer's"
        " first word into one token, so the prompt-length mask also covers the answer's first "
        "token and the model cannot generate the answer; the maintainer asked whether "
        "apply_chat_template caused it, the reporter: not using it did."
    ),
    label=(
        "matches: a loss that wrongly ignores an answer token is the opposite of unmasked_loss "
        "(which counts tokens it should ignore); none of the known labels: other_fault."
    ),
    mechanism="matches: the prompt mask one token too long, the twin masks the prompt exactly.",
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, WIDTH = 24, 16


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The SFT loss over the answer (as masked), Adam."""
    kit.seed_everything(SEED)
    pairs = lm_kit.pairs(SEED, 1200, vocab=VOCAB, width=WIDTH, words=(2, 5), rule="map")
    position = torch.arange(WIDTH)[None, :]
    # The prompt's length as counted: faulty, one token longer (the merged space and word).
    masked_to = pairs.prompt if fixed else pairs.prompt + 1
    ignored = (position < masked_to[:, None]) | (position >= pairs.length[:, None])
    labels = lm_kit.next_labels(pairs.tokens.masked_fill(ignored, lm_kit.IGNORE))
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return lm_kit.gpt(VOCAB, WIDTH)

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
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
