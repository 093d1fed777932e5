"""llama-recipes' Alpaca dataset labelled the prompt and the padding 0, not -100: both counted
in the loss, and the fine-tuned model wrote meaningless output."""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from faultbench import Monitor
from faultbench.realbugs import Reference, Symptom, kit, lm_kit
from faultbench.realbugs.case import SourceCheck

SOURCE = "https://github.com/meta-llama/llama-cookbook/issues/74"
REPORTED = (
    "Fine-tuning Llama 2 on the recipes' Alpaca dataset, the model output meaningless codes "
    "rather than the wanted answers; labelling the prompt and the padding -100 gave normal "
    "behaviour."
)
DIAGNOSIS = (
    "The dataset marked the prompt and the padding -1 and then replaced every negative label "
    "with 0 (a scheme from code whose loss ignored index 0), but the Hugging Face loss "
    "ignores only -100: every prompt and padding position was trained to predict token 0, "
    "most of the counted tokens. The merged fix (pull request 107, for issues 73, 74, 82 and "
    "101) labels them -100."
)
LABEL = "unmasked_loss"
MODEL = "transformer"
OPTIMIZER = "AdamW"
DATA = (
    "Generated instructions (a prompt of 2 to 4 random tokens, a separator standing for '### "
    "Response:', the answer the prompt through a fixed substitution, then <eos>), "
    "right-padded to 24 tokens with id 0, stand in for Alpaca; a 2-layer LlamaForCausalLM of "
    "width 32 built from a config and trained from scratch rather than LoRA on Llama 2. "
    "Accuracies are the exact match of greedy decoding from the prompt."
)
SYMPTOM = Symptom("final_val_acc", below=0.3)  # meaningless output
SEED = 0
KIND = "next_token"  # what the task predicts (the Monitor's kind)
REFERENCE = Reference(
    1.0,
    (
        "exact match of answers that a fixed rule writes from the prompt (a fixed "
        "substitution): 1.0 by construction"
    ),
)
EPOCHS = 5
FIDELITY_DATA = "stand-in: generated substitute-the-prompt instructions for Alpaca"
FIDELITY_MODEL = "stand-in: LlamaForCausalLM at 2 layers, width 32, from a config"
FIDELITY_CODE = "stand-in: our loop; the labels made as the dataset made them (0, not -100)"
REPORTED_EFFECT = "none given: meaningless output after fine-tuning"
REENACTED_EFFECT = "greedy exact match 0.00 against the twin's 1.00"
OBSERVED = True
SOURCE_CHECK = SourceCheck(
    read=(
        "issue 74 and the related issues 73 and 101 (stored issues corpus): the prompt labelled "
        "-1 and padding 0 (issue 101: labels of the prompt set to 0), meaningless output after "
        "fine-tuning, normal with -100; the maintainer points to pull request 107."
    ),
    label="matches: a loss that counts the prompt and the padding is unmasked_loss.",
    mechanism=(
        "matches: prompt and padding labelled 0 where only -100 is ignored, the twin labels them "
        "-100."
    ),
)
TWIN_DEPARTURES: tuple[str, ...] = ()  # the forms differ on the bug's lines only
VOCAB, WIDTH = 24, 24


class CausalLM(nn.Module):
    """LlamaForCausalLM as the loop calls it: ids (and mask) in, logits out."""

    def __init__(self) -> None:
        super().__init__()
        config = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
            pad_token_id=lm_kit.PAD,
            bos_token_id=lm_kit.BOS,
            eos_token_id=lm_kit.EOS,
        )
        self.lm = LlamaForCausalLM(config)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.lm(input_ids=ids, attention_mask=mask).logits


def script(fixed: bool, *, epochs: int = EPOCHS) -> kit.CaseRun:
    """The recipes' loop: labels from the dataset, the model's shifted loss, AdamW."""
    kit.seed_everything(SEED)
    pairs = lm_kit.pairs(SEED, 1200, vocab=VOCAB, width=WIDTH, words=(2, 4), rule="map")
    position = torch.arange(WIDTH)[None, :]
    outside = (position < pairs.prompt[:, None]) | (position >= pairs.length[:, None])
    # The dataset's labels: the example with the prompt and the padding marked...
    labels = pairs.tokens.masked_fill(outside, lm_kit.IGNORE if fixed else 0)  # ...-100, or 0
    mask = pairs.attention_mask
    train, val = slice(0, 1000), slice(1000, None)

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        shifted = lm_kit.next_labels(target)  # the model's loss shifts them
        return F.cross_entropy(logits.reshape(-1, VOCAB), shifted.reshape(-1))

    def make_model() -> nn.Module:
        torch.manual_seed(SEED)
        return CausalLM()

    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.utils.data.TensorDataset(pairs.tokens[train], mask[train], labels[train])
    loader = kit.batches_of(data, 32)
    monitor = Monitor(model, optimizer, every=1, kind=KIND)
    for _epoch in range(epochs):
        for ids, attention, target in monitor.batches(loader):
            optimizer.zero_grad()
            logits = model(ids, attention)
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
