"""Two small language-model tasks: generated prompt -> answer sequences, a causal transformer.

- ``numbers`` (the tuned-on one): numbers written out, to digits. ``<bos>
  [write | in digits] three hundred forty two =`` -> ``3 4 2 <eos>``, 0 to 999.
  The instruction sits in the prompt and does not count in the loss. The
  numbers that end alike (every phrasing of "... forty two") are one *source
  unit*, which the split keeps on one side: validation asks for endings that
  training never showed.
- ``spelling`` (held out): the other way, in another language and at other
  lengths: ``<bos> [say] 3 4 2 ->`` -> ``three hundred forty two <eos>``, a
  number's two phrasings one unit.

Both train the same way: right-padded rows, the loss on the answer's tokens only
(:mod:`faultbench.tasks.sequences`), validation by greedy decoding (exact match)
and teacher-forced token accuracy. Their reference is a 2-block transformer of
width 64 with 4 heads; the family draws 2 to 4 blocks of width 64 to 128, 2 or
4 heads, a warm-up or not, dropout and the optimizer.
"""

from __future__ import annotations

from faultbench.tasks.design import Design, Family, Network
from faultbench.tasks.sequences import SPECIALS
from faultbench.tasks.task import TASKS, Task, TrainDefaults

ONES = (
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"),
    *("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen"),
    *("eighteen", "nineteen"),
)
TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
DIGITS = tuple(str(d) for d in range(10))
LARGEST = 999  # the numbers written out: 0 to LARGEST
TO_DIGITS: tuple[tuple[str, ...], ...] = ((), ("write",), ("in", "digits"))  # the phrasings
TO_WORDS: tuple[tuple[str, ...], ...] = ((), ("say",))
SPLIT_SEED = 20_261_202  # the seed of both tasks' splits
# Updates per run and examples per update: chosen on cost (a run of the reference in a
# few seconds of one thread) and on healthy runs alone, as a task's recipe must be.
STEPS = 200
BATCH = 32
LR = 1e-3  # Adam's working rate for the reference (measured: faultbench calibrate --what rates)


def words(n: int) -> tuple[str, ...]:
    """``n`` (0 to 999) written out in English words, without "and": 342 -> three hundred
    forty two."""
    if n < 20:
        return (ONES[n],)
    if n < 100:
        return (TENS[n // 10 - 2],) + (() if n % 10 == 0 else (ONES[n % 10],))
    rest = n % 100
    return (ONES[n // 100], "hundred") + (words(rest) if rest else ())


def numbers_examples() -> list[tuple[tuple[str, ...], tuple[str, ...], int]]:
    """Every number written out, in each phrasing, to its digits: (prompt, answer, unit).

    A unit is the numbers that end alike (``n % 100``: "forty two", "one hundred forty
    two", ... in every phrasing), as a document's chunks share its topic: split by unit,
    validation asks for endings training never showed; split by example, it recalls them.
    """
    return [
        ((*prefix, *words(n), "="), tuple(str(n)), n % 100)
        for n in range(LARGEST + 1)
        for prefix in TO_DIGITS
    ]


def spelling_examples() -> list[tuple[tuple[str, ...], tuple[str, ...], int]]:
    """Every number's digits, in each phrasing, to its words: (prompt, answer, unit)."""
    return [
        ((*prefix, *str(n), "->"), words(n), n) for n in range(LARGEST + 1) for prefix in TO_WORDS
    ]


def _family() -> Family:
    return Family(
        "transformer",
        optimizers=("adam", "adamw", "sgd", "rmsprop"),
        depths=(2, 3, 4),
        widths=(64, 96, 128),
        activations=("gelu", "relu"),
        norms=("layer",),
        dropouts=(0.0, 0.1),
        batch_sizes=(16, 32),
        schedules=("constant", "warmup_decay"),
        clips=(0.0, 1.0),
        weight_decays=("off", "on"),
        inits=("default",),
        heads=(2, 4),
    )


def _reference() -> Design:
    net = Network("transformer", widths=(64, 64), activation="gelu", norm="layer", dropout=0.1)
    return Design(network=net, optimizer="adam", lr=LR, batch_size=BATCH)


NOT_FOR_TOKENS = {
    "huge_inputs": "inputs are token ids: scaling an index is not a huge input",
    "dead_units": (
        "its variants silence a hidden Linear layer of a fully connected stack; a transformer's "
        "MLPs sit inside residual blocks, which a dead unit's output is added to, not cut from"
    ),
    # Held-out faults written for class labels and fully connected stacks:
    "sorted_classes": "an example is a token sequence, not one class to sort the data by",
    "label_noise": "it moves a class label to another class; a sequence's labels are tokens",
    "deep_sigmoid": "it stacks sigmoid fully connected layers; a transformer is residual blocks",
}


def _task(name: str, examples: list, vocab: tuple[str, ...], context: int) -> Task:
    defaults = TrainDefaults(
        architecture="transformer", hidden=64, lr=LR, batch_size=BATCH, steps=STEPS
    )
    task = Task.from_sequences(
        name,
        examples,
        vocab,
        context=context,
        defaults=defaults,
        reference=_reference(),
        family=_family(),
        split_seed=SPLIT_SEED,
    )
    from dataclasses import replace

    return replace(task, inapplicable=NOT_FOR_TOKENS)


@TASKS.register("numbers")
def build_numbers() -> Task:
    """Numbers written out in words, to digits (0-999, 3 phrasings); a transformer, ~4 s CPU a run.

    The sequence rules of the reference diagnosers were tuned on it. A run of the reference
    (200 updates, every step recorded, 10 evaluations) measured 3.5 and 4.6 s of one thread's
    CPU on this project's 2-core machine under a load of about 4 (seeds 0 and 1).
    """
    vocab = (*SPECIALS, "write", "in", "digits", "=", *ONES, *TENS, "hundred", *DIGITS)
    return _task("numbers", numbers_examples(), vocab, context=12)


@TASKS.register("spelling")
def build_spelling() -> Task:
    """Numbers in digits, to words (0-999, 2 phrasings); a transformer, ~3 s CPU a run.

    A run of the reference measured 3.1 and 3.2 s of one thread's CPU (seeds 0 and 1), as
    measured for numbers.
    """
    vocab = (*SPECIALS, "say", "->", *DIGITS, *ONES, *TENS, "hundred")
    return _task("spelling", spelling_examples(), vocab, context=11)
