"""MBartForCausalLM's loss compares each position's logits with its own token: the model copies."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import MBartConfig, MBartForCausalLM

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/huggingface/transformers/issues/27517"
REPORTED = (
    "Following the causal language modeling tutorial with MBartForCausalLM in place of "
    "DistilGPT2, the model seems to copy its input during training."
)
DIAGNOSIS = (
    "The tutorial's collator makes the labels a copy of input_ids and leaves the shift to the "
    "model, as GPT-2 and Llama shift inside their loss; MBartForCausalLM's loss compared the "
    "logits with the unshifted labels, so each position was trained to predict the token it "
    "already sees. The fix shifts logits and labels by one, as the other causal models do."
)
LABEL = "labels_not_shifted"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated text (a peaked Markov chain over 20 tokens, documents of 12 to 24 tokens, "
    "right-padded, padding labelled -100 as DataCollatorForLanguageModeling does) stands in "
    "for the tutorial's ELI5 text; a 2-layer MBartForCausalLM built from a config (no "
    "weights). Train and validation accuracies are next-token accuracy, shifted as inference "
    "uses the model."
)
SYMPTOM = Symptom("min_loss", below=0.1)  # copying the visible token drives the loss to ~0
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.538,
    (
        "the Markov chain's own best guess of each next token (lm_kit.best_guess_accuracy) on"
        " the case's generated rows: 0.538"
    ),
)
EPOCHS = 4
FIDELITY_DATA = "stand-in: generated Markov-chain text for the ELI5 subset"
FIDELITY_MODEL = "stand-in: MBartForCausalLM at 2 layers, width 32, from a config"
FIDELITY_CODE = "stand-in: our loop; the unshifted loss is MBartForCausalLM's own formula"
REPORTED_EFFECT = "none given: the model copies its input during training"
REENACTED_EFFECT = "training loss falls to 0.05 (copying) against the twin's floor of 1.5"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue (stored issues corpus): the tutorial with MBartForCausalLM copies its input; "
        "the labels are a copy of input_ids and MBart's loss, unlike GPT-2's and Llama's, does "
        "not shift them."
    ),
    label="matches: an unshifted causal-LM loss is labels_not_shifted.",
    mechanism=(
        "matches: MBartForCausalLM's own loss formula, the twin shifts as the other causal models"
        " do, on a small model from a config."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, WIDTH = 24, 24


def corpus(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Documents of 12..24 tokens, right-padded, and their attention mask."""
    rows = lm_kit.documents(seed, n, WIDTH, vocab=VOCAB)
    lengths = torch.from_numpy(np.random.default_rng(seed + 1).integers(12, WIDTH + 1, n))
    mask = (torch.arange(WIDTH)[None, :] < lengths[:, None]).long()
    return rows.masked_fill(mask == 0, lm_kit.PAD), mask


class CausalLM(nn.Module):
    """The Hugging Face model as the loop calls it: ids and mask in, logits out."""

    def __init__(self) -> None:
        super().__init__()
        config = MBartConfig(
            vocab_size=VOCAB,
            d_model=32,
            decoder_layers=2,
            decoder_attention_heads=4,
            decoder_ffn_dim=64,
            max_position_embeddings=64,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            pad_token_id=lm_kit.PAD,
            bos_token_id=lm_kit.BOS,
            eos_token_id=lm_kit.EOS,
        )
        self.lm = MBartForCausalLM(config)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.lm(input_ids=ids, attention_mask=mask).logits


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The tutorial's loop: labels = input_ids (padding -100), AdamW, the model's loss."""
    kit.seed_everything(SEED)
    tokens, mask = corpus(SEED, 1200)
    labels = tokens.masked_fill(mask == 0, lm_kit.IGNORE)  # DataCollatorForLanguageModeling
    train, val = slice(0, 1000), slice(1000, None)

    def aligned(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if fixed:  # GPT-2's and Llama's loss: tokens < n predict n
            return logits[:, :-1], target[:, 1:]
        return logits, target  # MBartForCausalLM's loss: no shift

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        scores, goal = aligned(logits, target)
        return F.cross_entropy(scores.reshape(-1, VOCAB), goal.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return CausalLM()

    def task_scores(rows: slice) -> tuple[float, float]:
        return lm_kit.next_token_scores(model, tokens[rows], lm_kit.next_labels(labels[rows]))

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    data = torch.utils.data.TensorDataset(tokens[train], mask[train], labels[train])
    loader = kit.batches_of(data, 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, attention, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids, attention)
            loss = loss_fn(logits, target)
            loss.backward()
            optimizer.step()
            scores, goal = aligned(logits, target)
            monitor.step(loss, scores, goal, mask=attention[:, : goal.shape[1]])
        val_loss, val_acc = task_scores(val)
        monitor.log_eval(
            train_acc=task_scores(slice(0, 200))[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=labels[train]
    )
