"""What the language-model cases share: generated token data, a small decoder, the evaluation.

Everything a bug lives in (the labels, the attention's mask, the loss's normalization,
the checkpoint, the split) stays in the case's own file. What is here is what every
reporter's script does the same way: token rows of generated text (no download),
prompt -> answer pairs padded to one width, a nanoGPT-sized decoder, the correct
next-token labels of those pairs, and the evaluation (greedy exact match of the
answers, next-token accuracy and loss).

Ids 0, 1, 2 are ``<pad>``, ``<bos>``, ``<eos>`` in every generated vocabulary, as in
the benchmark's own sequence tasks (:mod:`faultbench.tasks.sequences`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from faultbench.faults.tokens import greedy_exact_match
from faultbench.faults.transformer import transformer
from faultbench.tasks.sequences import IGNORE, next_token_labels

__all__ = [
    "BOS",
    "EOS",
    "FIRST",
    "IGNORE",
    "PAD",
    "SEP",
    "Decoder",
    "Pairs",
    "answer_labels",
    "best_guess_accuracy",
    "chain",
    "documents",
    "exact_match",
    "gpt",
    "mixed",
    "next_labels",
    "next_token_scores",
    "pairs",
    "windows",
]

PAD, BOS, EOS = 0, 1, 2  # the specials of every generated vocabulary
SEP = 3  # ends a prompt (a chat template's "### Response:"); documents never use it
FIRST = 4  # the first ordinary token id


def chain(seed: int, vocab: int, *, concentration: float = 0.1) -> np.ndarray:
    """A Markov chain's transition matrix over the ordinary tokens of ``vocab`` (each row
    peaked: a small ``concentration`` makes the next token more certain)."""
    tokens = vocab - FIRST
    return np.random.default_rng(seed).dirichlet(np.full(tokens, concentration), size=tokens)


def documents(
    seed: int,
    n: int,
    length: int,
    *,
    vocab: int,
    concentration: float = 0.1,
    transition: np.ndarray | None = None,
) -> torch.Tensor:
    """``n`` rows of ``length`` ordinary tokens walked along a Markov chain (``transition``,
    or else :func:`chain` of ``seed``): generated text whose next token is predictable but
    not certain (the chain's entropy is the loss's floor)."""
    if transition is None:
        transition = chain(seed, vocab, concentration=concentration)
    rng = np.random.default_rng(seed + 1)
    tokens = vocab - FIRST
    out = np.zeros((n, length), dtype=np.int64)
    out[:, 0] = rng.integers(0, tokens, size=n)
    cumulative = transition.cumsum(1)
    for t in range(1, length):
        draws = rng.random(n)[:, None]
        out[:, t] = np.minimum((draws > cumulative[out[:, t - 1]]).sum(1), tokens - 1)
    return torch.from_numpy(out + FIRST)


def windows(docs: torch.Tensor, length: int, stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every ``length``-token window of each row of ``docs``, ``stride`` apart, and the row
    (the source unit: a document, a speaker's lines) each window came from."""
    starts = range(0, docs.shape[1] - length + 1, stride)
    rows = [docs[d, s : s + length] for d in range(len(docs)) for s in starts]
    units = torch.arange(len(docs)).repeat_interleave(len(starts))
    return torch.stack(rows), units


def best_guess_accuracy(transition: np.ndarray, tokens: torch.Tensor) -> float:
    """Share of the next tokens of ``tokens`` (rows walked along ``transition``) that the
    chain's own best guess, each token's most likely successor, gets right: the next-token
    accuracy no model can beat on them (a case's reference)."""
    best = torch.from_numpy(transition.argmax(1) + FIRST)
    previous, following = tokens[:, :-1], tokens[:, 1:]
    return float((best[previous - FIRST] == following).double().mean())


@dataclass(frozen=True)
class Pairs:
    """Prompt -> answer examples, one row each: ``<bos> prompt <sep> answer <eos> <pad>...``."""

    tokens: torch.Tensor  # (n, width) int64, right-padded with PAD
    prompt: torch.Tensor  # (n,) tokens of the prompt, <bos> and <sep> included
    length: torch.Tensor  # (n,) real tokens: <bos>, prompt, answer and <eos>
    unit: torch.Tensor  # (n,) the source unit (document, conversation) each example came from

    def rows(self, index: torch.Tensor | slice) -> Pairs:
        """The examples at ``index``."""
        return Pairs(self.tokens[index], self.prompt[index], self.length[index], self.unit[index])

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def attention_mask(self) -> torch.Tensor:
        """1 on real tokens, 0 on padding (the tokenizer's ``attention_mask``)."""
        return (torch.arange(self.tokens.shape[1])[None, :] < self.length[:, None]).long()


def pairs(
    seed: int,
    n: int,
    *,
    vocab: int,
    width: int,
    words: tuple[int, int] = (2, 6),
    rule: str = "reverse",
) -> Pairs:
    """``n`` examples whose prompt is 2..6 (``words``) random ordinary tokens and whose answer
    is a function of it (``rule``): ``reverse`` (the prompt backwards), ``map`` (each token
    through one fixed permutation of the vocabulary), ``sort``, ``ends`` (its first and
    last tokens through that permutation: a short answer to a long prompt) or ``noise``
    (one random token: a reply no model can predict).

    Raises:
        ValueError: an unknown ``rule``, or a ``width`` too narrow for the longest example.
    """
    rules = ("reverse", "map", "sort", "ends", "noise")
    if rule not in rules:
        raise ValueError(f"rule={rule!r}; expected one of {rules}")
    if width < 2 * words[1] + 3:
        raise ValueError(f"width={width} cannot hold a prompt and answer of {words[1]} words")
    rng = np.random.default_rng(seed)
    table = rng.permutation(vocab - FIRST) + FIRST
    out = np.full((n, width), PAD, dtype=np.int64)
    prompt, length = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for row in range(n):
        k = int(rng.integers(words[0], words[1] + 1))
        said = rng.integers(FIRST, vocab, size=k)
        answer = _answer(rule, said, table, rng, vocab)
        ids = [BOS, *said, SEP, *answer, EOS]
        out[row, : len(ids)] = ids
        prompt[row], length[row] = 2 + k, len(ids)
    units = torch.arange(n)
    return Pairs(torch.from_numpy(out), torch.from_numpy(prompt), torch.from_numpy(length), units)


def _answer(
    rule: str, said: np.ndarray, table: np.ndarray, rng: np.random.Generator, vocab: int
) -> np.ndarray:
    if rule == "reverse":
        return said[::-1]
    if rule == "map":
        return table[said - FIRST]
    if rule == "sort":
        return np.sort(said)
    if rule == "ends":
        return table[said[[0, -1]] - FIRST]
    return rng.integers(FIRST, vocab, size=1)  # noise: drawn only for this rule


def mixed(first: Pairs, second: Pairs, *, share: float, seed: int) -> Pairs:
    """Row by row, an example of ``first`` (with probability ``share``) or of ``second``."""
    pick = torch.from_numpy(np.random.default_rng(seed).random(len(first)) < share)
    return Pairs(
        torch.where(pick[:, None], first.tokens, second.tokens),
        torch.where(pick, first.prompt, second.prompt),
        torch.where(pick, first.length, second.length),
        torch.arange(len(first)),
    )


def answer_labels(p: Pairs) -> torch.Tensor:
    """The correct labels of ``p``, aligned with the logits: position ``t`` predicts token
    ``t + 1``, only the answer's tokens (its ``<eos>`` included) count, the rest are IGNORE."""
    return torch.from_numpy(next_token_labels(p.tokens.numpy(), p.prompt.numpy(), p.length.numpy()))


def next_labels(labels: torch.Tensor) -> torch.Tensor:
    """``labels`` (one per input position, as a collator makes them from ``input_ids``)
    moved to the position that predicts them: position ``t`` gets label ``t + 1``, the last
    position IGNORE (what a causal model's loss does inside before comparing)."""
    ignored = torch.full_like(labels[:, :1], IGNORE)
    return torch.cat([labels[:, 1:], ignored], 1)


def gpt(vocab: int, context: int, *, width: int = 32, layers: int = 2, heads: int = 4) -> nn.Module:
    """nanoGPT at a toy size (:mod:`faultbench.faults.transformer`): causal, no dropout."""
    names = tuple(f"layer{i + 1}" for i in range(layers))
    return transformer(
        vocab=vocab,
        context=context,
        widths=(width,) * layers,
        heads=heads,
        activation=nn.GELU,
        dropout=0.0,
        block_names=names,
    )


class _Block(nn.Module):
    """Pre-norm block around any attention module (``attention(x)`` returns the output, or
    ``(output, weights)`` as ``nn.MultiheadAttention`` does)."""

    def __init__(self, width: int, attention: nn.Module) -> None:
        super().__init__()
        self.attn_norm, self.attn = nn.LayerNorm(width), attention
        self.mlp_norm = nn.LayerNorm(width)
        wide = 4 * width
        self.mlp = nn.Sequential(nn.Linear(width, wide), nn.GELU(), nn.Linear(wide, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attended = self.attn(self.attn_norm(x))
        x = x + (attended[0] if isinstance(attended, tuple) else attended)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    """A decoder-only model around the case's own attention: ``attention(layer)`` builds the
    attention module of block ``layer`` (where a reporter's mask lives), of ``width``."""

    def __init__(
        self,
        vocab: int,
        context: int,
        attention: Callable[[int], nn.Module],
        *,
        width: int = 32,
        layers: int = 2,
    ) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(_Block(width, attention(i)) for i in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.token(ids) + self.position.weight[: ids.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


@torch.no_grad()
def exact_match(model: nn.Module, p: Pairs) -> float:
    """Share of ``p`` whose answer greedy decoding from the prompt writes exactly (``<eos>``
    included), the model in eval mode meanwhile."""
    was = model.training
    model.eval()
    hits = greedy_exact_match(model, p.tokens, p.prompt, p.length, PAD)
    model.train(was)
    return float(hits.float().mean())


@torch.no_grad()
def next_token_scores(
    model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor
) -> tuple[float, float]:
    """(loss, accuracy) of the model's logits on ``tokens`` against ``labels`` (aligned with
    the logits, IGNORE skipped), the model in eval mode meanwhile."""
    was = model.training
    model.eval()
    logits = model(tokens)
    model.train(was)
    counted = labels != IGNORE
    loss = F.cross_entropy(logits[counted], labels[counted])
    hits = (logits[counted].argmax(-1) == labels[counted]).float().mean()
    return float(loss), float(hits)
