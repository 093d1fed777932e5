"""RoFormerForCausalLM built a bidirectional mask even as a decoder: the CLM loss collapsed."""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import RoFormerConfig, RoFormerForCausalLM

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/huggingface/transformers/issues/48745"
REPORTED = (
    "Training RoFormerForCausalLM (is_decoder=True) as a plain causal language model on CPU, "
    "the loss fell to almost zero within a few hundred steps on random tokens; BigBird, "
    "RemBert and MegatronBert's causal-LM classes did the same, BertLMHeadModel did not."
)
DIAGNOSIS = (
    "Since v5.9.0 these models built their attention mask with the bidirectional mask helper "
    "whatever is_decoder said, so each position attended to the tokens after it and its label "
    "was visible. The fix (pull request 48760) builds the causal mask when the model is a "
    "decoder, as BertModel does, with a test that future tokens leave earlier states "
    "unchanged."
)
LABEL = "causal_mask_missing"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated text (a peaked Markov chain over 20 tokens, rows of 20 tokens) instead of the "
    "report's uniform random tokens, so that the fixed twin has something to learn; a 2-layer "
    "RoFormerForCausalLM of width 32 built from a config. The installed transformers has the "
    "fix, so the faulty form reaches the regression's bidirectional mask with "
    "is_decoder=False. Accuracies are next-token accuracy through the model as trained."
)
SYMPTOM = Symptom("min_loss", below=0.3)  # the loss collapses to ~0
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    0.536,
    (
        "the Markov chain's own best guess of each next token (lm_kit.best_guess_accuracy) on"
        " the case's generated rows: 0.536"
    ),
)
EPOCHS = 3
FIDELITY_DATA = "stand-in: generated Markov-chain text for the report's random tokens"
FIDELITY_MODEL = "stand-in: RoFormerForCausalLM itself, at 2 layers and width 32"
FIDELITY_CODE = "stand-in: is_decoder=False gives the regression's bidirectional mask"
REPORTED_EFFECT = "none given: loss to almost zero within a few hundred steps on random tokens"
REENACTED_EFFECT = "training loss falls to 0.17 in 96 steps against the twin's floor of 1.28"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "the issue and the fix's pull request 48760 (stored issues corpus): the four causal-LM "
        "classes built a bidirectional mask whatever is_decoder said since v5.9.0, the loss fell "
        "to almost zero on random tokens; the fix builds the causal mask for a decoder, with a "
        "test that future tokens leave earlier states unchanged."
    ),
    label="matches: a decoder that attends to later tokens is causal_mask_missing.",
    mechanism=(
        "matches: RoFormerForCausalLM itself at a small size, the bidirectional mask against the "
        "causal one."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, CONTEXT = 24, 20


class CausalLM(nn.Module):
    """RoFormerForCausalLM as the loop calls it: ids in, logits out."""

    def __init__(self, decoder: bool) -> None:
        super().__init__()
        config = RoFormerConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            pad_token_id=lm_kit.PAD,
            is_decoder=decoder,
        )
        self.lm = RoFormerForCausalLM(config)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids).logits


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """labels = input_ids, the model's shifted causal-LM loss, AdamW."""
    kit.seed_everything(SEED)
    tokens = lm_kit.documents(SEED, 1200, CONTEXT, vocab=VOCAB)
    labels = lm_kit.next_labels(tokens)
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        # Faulty: the regression's bidirectional mask (reached with is_decoder=False here).
        return CausalLM(decoder=fixed)

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
        val_loss, val_acc = lm_kit.next_token_scores(model, tokens[val], labels[val])
        monitor.log_eval(
            train_acc=lm_kit.next_token_scores(model, tokens[:200], labels[:200])[1],
            val_acc=val_acc,
            val_loss=val_loss,
            val_token_acc=val_acc,
        )
    return kit.finish(
        monitor, make_model=make_model, loss_fn=loss_fn, X=tokens[train], y=labels[train]
    )
