"""GPT-2's language-modeling loss without the shift: fine-tuning destroys the language model."""

from functools import cache

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/huggingface/transformers/pull/404"
REPORTED = (
    "Fine-tuning GPT-2 with lm_labels set to the input, minimizing the language-modeling loss "
    "destroyed the language model within a few steps."
)
DIAGNOSIS = (
    "GPT and GPT-2's loss took the cross-entropy of the logits against the labels at the same "
    "positions, so the i-th logits were trained to predict the i-th token, which the model "
    "already reads, instead of the (i+1)-th. The merged fix shifts the logits and the labels "
    "by one before the cross-entropy."
)
LABEL = "labels_not_shifted"
MODEL = "transformer"
OPTIMIZER = "Adam"
DATA = (
    "A 2-layer GPT2LMHeadModel built from a config is first pretrained on generated text (a "
    "Markov chain over 20 tokens, shared by both forms and correct in both), then fine-tuned "
    "on text of a related chain, lm_labels = input_ids. Accuracies are next-token accuracy on "
    "the fine-tuning text, shifted as generation uses the model; the first is measured before "
    "fine-tuning."
)
SYMPTOM = Symptom("final_val_acc", below=0.15)  # the language model destroyed
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.427,
    (
        "the fine-tuning chain's own best guess of each next token "
        "(lm_kit.best_guess_accuracy) on its generated rows: 0.427"
    ),
)
EPOCHS = 3
FIDELITY_DATA = "stand-in: generated Markov-chain text for pretraining and fine-tuning"
FIDELITY_MODEL = "stand-in: GPT2LMHeadModel at 2 layers, width 32, pretrained here briefly"
FIDELITY_CODE = "stand-in: our loop; the unshifted loss is the pre-fix GPT2LMHeadModel formula"
REPORTED_EFFECT = "none given: the language model is destroyed within a few steps"
REENACTED_EFFECT = "next-token accuracy falls from 0.22 to 0.06; the twin's rises to 0.41"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the merged pull request's description (stored issues corpus): the GPT and GPT-2 losses "
        "took cross-entropy without shifting the logits, destroying the language model within a "
        "few steps; the i-th logits should predict the (i+1)-th token."
    ),
    label="matches: labels not shifted against the logits is labels_not_shifted.",
    mechanism=(
        "matches: the pre-fix loss formula against the shifted one, on a small stand-in GPT-2; "
        "the Monitor's extra branch is declared in TWIN_DEPARTURES."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = (
    (
        "the Monitor is handed the shifted logits and targets the fixed loss compares (what the "
        "trace records, not what trains)"
    ),
)
VOCAB, WIDTH = 24, 24


def config() -> GPT2Config:
    return GPT2Config(
        vocab_size=VOCAB,
        n_positions=WIDTH,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=lm_kit.BOS,
        eos_token_id=lm_kit.EOS,
    )


class LMHead(nn.Module):
    """GPT2LMHeadModel as the loop calls it: ids in, logits out."""

    def __init__(self) -> None:
        super().__init__()
        self.lm = GPT2LMHeadModel(config())

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids).logits


def texts() -> tuple[torch.Tensor, torch.Tensor]:
    """(pretraining text, fine-tuning text): the second's chain is 30% the first's."""
    base = lm_kit.chain(SEED, VOCAB)
    shifted = 0.3 * base + 0.7 * lm_kit.chain(SEED + 7, VOCAB)
    pretrain = lm_kit.documents(SEED, 1000, WIDTH, vocab=VOCAB, transition=base)
    finetune = lm_kit.documents(SEED + 3, 1200, WIDTH, vocab=VOCAB, transition=shifted)
    return pretrain, finetune


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


@cache
def pretrained() -> dict[str, torch.Tensor]:
    """The weights both forms start fine-tuning from (a correct, shifted loss)."""
    torch.manual_seed(SEED)
    model = LMHead()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    text = texts()[0]
    for _epoch in range(2):
        for start in range(0, len(text), 32):
            optimizer.zero_grad()
            ids = text[start : start + 32]
            next_token_loss(model(ids), ids).backward()
            optimizer.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """Fine-tuning with lm_labels = input_ids, Adam at 1e-3."""
    kit.seed_everything(SEED)
    tokens = texts()[1]
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if fixed:  # the merged fix: the i-th logits predict the (i+1)-th token
            return next_token_loss(logits, labels)
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))

    def make_model() -> nn.Module:
        model = LMHead()
        model.load_state_dict(pretrained())
        return model

    def evaluate() -> None:
        val_loss, val_acc = lm_kit.next_token_scores(
            model, tokens[val], lm_kit.next_labels(tokens[val])
        )
        train_acc = lm_kit.next_token_scores(model, tokens[:200], lm_kit.next_labels(tokens[:200]))[
            1
        ]
        monitor.log_eval(
            train_acc=train_acc, val_acc=val_acc, val_loss=val_loss, val_token_acc=val_acc
        )

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = kit.batches_of(torch.utils.data.TensorDataset(tokens[train]), 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    evaluate()
    for _epoch in range(epochs):
        for (ids,) in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids)
            loss = loss_fn(logits, ids)
            loss.backward()
            optimizer.step()
            if fixed:
                monitor.step(loss, logits[:, :-1], ids[:, 1:])
            else:
                monitor.step(loss, logits, ids)
        evaluate()
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=tokens[train]
    )
