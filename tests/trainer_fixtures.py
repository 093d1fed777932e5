"""Tiny Hugging Face models built from configs (nothing is downloaded), generated token
data, and the Trainer's arguments the Trainer tests share.

Imported first by those tests: it makes Hugging Face work offline and keeps this
repository's own ``datasets/`` folder from passing for Hugging Face's ``datasets``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded: every model is built from a config
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
# Run from the repository's root, this repository's own datasets/ folder (installed as
# faultbench.datasets) would pass for Hugging Face's `datasets` package, which transformers
# then uses as if installed: the root leaves the path (faultbench is installed, not read here).
_ROOT = str(Path(__file__).resolve().parents[1])
sys.path[:] = [
    p for p in sys.path if p not in ("", ".", _ROOT) and Path(p or ".").resolve() != Path(_ROOT)
]

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

VOCAB, CONTEXT, PAD = 32, 16, 0  # tokens 1..31 count; 0 pads
POSITIONS = 32  # position rows: twice the longest sequence, so half are never used


def counting(n: int, seed: int, *, padding_in_labels: bool = False) -> list[dict[str, Any]]:
    """Sequences that count up from a random token (31 wraps to 1), 6 to 16 long, right-padded
    with 0; the labels are the tokens, -100 at the padding (or the padding's 0 with
    ``padding_in_labels``: the padded-labels bug)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        length = int(torch.randint(6, CONTEXT + 1, (1,), generator=g))
        start = int(torch.randint(1, VOCAB, (1,), generator=g))
        ids = (start - 1 + torch.arange(length)) % (VOCAB - 1) + 1
        ids = torch.nn.functional.pad(ids, (0, CONTEXT - length), value=PAD)
        mask = (torch.arange(CONTEXT) < length).long()
        labels = ids if padding_in_labels else torch.where(mask == 1, ids, -100)
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return rows


def parity(n: int, seed: int) -> list[dict[str, Any]]:
    """Counting sequences labelled by whether they start on an odd token (a classifier's)."""
    return [
        {**{k: v for k, v in row.items() if k != "labels"}, "labels": int(row["input_ids"][0]) % 2}
        for row in counting(n, seed)
    ]


def _common() -> dict[str, Any]:
    return {"vocab_size": VOCAB, "pad_token_id": PAD}


def gpt2() -> torch.nn.Module:
    """GPT-2: learned positions, the output layer tied to the token embedding."""
    config = transformers.GPT2Config(
        n_positions=POSITIONS,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=1,
        eos_token_id=2,
        **_common(),
    )
    return transformers.GPT2LMHeadModel(config)


def llama() -> torch.nn.Module:
    """Llama: rotary positions, RMS norms, a gated MLP, an untied output layer."""
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
        **_common(),
    )
    return transformers.LlamaForCausalLM(config)


def bert_decoder() -> torch.nn.Module:
    """BERT as a decoder: causal attention, learned positions and token types, the output
    layer tied to the token embedding."""
    config = transformers.BertConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=POSITIONS,
        is_decoder=True,
        **_common(),
    )
    return transformers.BertLMHeadModel(config)


def bert_classifier() -> torch.nn.Module:
    """BERT classifying a sequence into two classes."""
    config = transformers.BertConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=POSITIONS,
        num_labels=2,
        **_common(),
    )
    return transformers.BertForSequenceClassification(config)


FAMILIES: dict[str, Callable[[], torch.nn.Module]] = {
    "gpt2": gpt2,
    "llama": llama,
    "bert": bert_decoder,
}


def built(make: Callable[[], torch.nn.Module], seed: int = 0) -> torch.nn.Module:
    """``make()`` with its weights drawn from ``seed`` (the caller's random stream kept)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def arguments(output_dir: Path, **overrides: Any) -> Any:
    """The Trainer's arguments the tests share: CPU, seed 0, no saving, logging or reports
    unless asked for."""
    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 16,
        "per_device_eval_batch_size": 64,
        "learning_rate": 3e-4,
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "seed": 0,
        **overrides,
    }
    return transformers.TrainingArguments(**settings)


def token_accuracy(prediction: Any) -> dict[str, float]:
    """compute_metrics of a causal LM: the share of counted next tokens its logits get right."""
    logits = prediction.predictions
    logits = logits[0] if isinstance(logits, tuple) else logits
    guess, target = logits[:, :-1].argmax(-1), prediction.label_ids[:, 1:]
    counted = target != -100
    return {"token_acc": float((guess[counted] == target[counted]).mean())}


def class_accuracy(prediction: Any) -> dict[str, float]:
    """compute_metrics of a classifier: its accuracy."""
    guess = np.asarray(prediction.predictions).argmax(-1)
    return {"accuracy": float((guess == prediction.label_ids).mean())}


@contextmanager
def one_thread() -> Iterator[None]:
    """Train on one thread, as the suite's workers share two cores; the caller's count after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class StopAt(transformers.TrainerCallback):  # type: ignore[misc]
    """Stops training after update ``step``, as a job that was preempted there."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            control.should_training_stop = True


class Forwards:
    """A forward hook of the test's own: each training forward's logits and the labels,
    attention mask it was called with (None where ``compute_loss`` took them out)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seen: list[tuple[torch.Tensor, Any, Any]] = []
        model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        if module.training:
            self.seen.append(
                (out.logits.detach(), kwargs.get("labels"), kwargs.get("attention_mask"))
            )
