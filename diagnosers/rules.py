"""``rules``: a rule-based diagnoser whose every threshold is relative to the run.

Each rule is one small function that reads the run and returns a
:class:`Finding` (fired or not, and the numbers it compared). Passive rules
read the trace only; when none of the decisive ones fires, a memorization
probe (see :mod:`faultbench.diagnosers._probe`) tells a loop that cannot
train a working model apart from a model or loss that cannot learn.

Written and tuned on digits only; its held-out score is measured on tasks it
was not written for. ``other_fault`` (a run that plainly failed, with no rule
to name why) was written from that principle alone, before any held-out-fault
run was looked at.

A sequence model's run (the trace holds per-token targets: the share counted in
the loss) is first read by :data:`SEQUENCE`, the rules for the bugs of training
a language model, written and tuned on the ``numbers`` task only (then frozen,
and measured on ``spelling``). They fire on a classifier's run never: its trace
has none of what they read. Two of the bugs have no rule: a leaky split (a
validation score "too good" needs the task's own generalization gap to compare
with, which a trace does not hold: on a task that generalizes, a healthy run
looks the same) and micro-batches averaged per batch (on numbers it only
trained worse, with no signature of its own).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from faultbench.diagnosers import _features as f
from faultbench.diagnosers._probe import RATES, Memorization, memorize
from faultbench.scoring.diagnosis import DIAGNOSERS, Diagnosis, finite_or_none
from faultbench.scoring.run import Run

START_FACTOR = 2.0  # sane inits start near ln C; twice that means inputs far off unit scale
WAIT_SHARE = 0.5  # waiting more than computing: the loader is the bottleneck (profiler lore)
DEAD_SHARE = 0.5  # more than half a layer without any gradient is not constant inputs
JITTER_DROP = 0.2  # accumulation shrinks step noise like 1/t, >= 5x over a run (see _features)
UPDATE_RATIO = 1e-2  # 10x the ~1e-3 update/weight ratio of healthy training (Karpathy, cs231n)
OTHER_FAULT = "other_fault"  # broken, and none of the nine (faultbench.faults' answer label)
LOSS_FALL = 0.8  # learned: the loss ended below this share of its start (the healthy bar's)
SPIKE_SHARE = 0.01  # more than 1% of late steps above twice the start loss: not a fluke
FLOOR_SLACK = 1e-3  # float rounding below the softmax floor
# Sequence models (tuned on numbers):
PADDING_COUNTED = 0.05  # a correct loss counts no padding at all; 5% is no rounding
FUTURE_SHARE = 0.01  # a causal model puts exactly 0 on later positions; float noise is far below
ACCUMULATED = 1.5  # a first loss this many times ln V: micro-batch losses summed, not averaged
COPY_TOKENS = 0.9  # teacher-forced token accuracy this high ...
COPY_EXACT = 0.1  # ... while greedy decoding gets this few answers: trained on what it sees
TOKEN_GAP = 0.02  # token accuracy below the exact match by this much (the exact match is read
# on a sample of 256 answers: about 0.03 of sampling error either way): other tokens count
MIN_SEQUENCE_WIDTH = 16  # a language model's width is below its vocabulary by design; a layer
# narrower than this holds no usable representation of a token


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one run."""

    fired: bool  # whether the rule's signature is present
    evidence: dict[str, Any] = field(default_factory=dict)  # the numbers it compared


def learned_well(run: Run) -> bool:
    """A classifier's training accuracy at least halfway from chance to perfect; on another
    kind, whose score's reachable level depends on its data (a regression's R²), the training
    loss's last tenth below :data:`LOSS_FALL` of its first tenth, the healthy bar's own test."""
    if f.is_classes(run):
        acc = f.final_train_acc(run)
        return math.isfinite(acc) and acc >= (1.0 + f.chance(run)) / 2
    fell = f.loss_fell(run)
    return math.isfinite(fell) and fell < LOSS_FALL


def loss_at_start(run: Run) -> Finding:
    """huge_inputs: the untrained model's loss is far above where a sane initialization starts
    (ln C for classes, ln 2 per label, the targets' variance for a squared error), or not
    finite. Silent when the run's kind gives no such reference."""
    first, lnc = f.first_loss(run), f.ln_c(run)
    fired = math.isfinite(lnc) and (not math.isfinite(first) or first > START_FACTOR * lnc)
    return Finding(fired, {"first_loss": first, "loss_reference": lnc})


def data_wait(run: Run) -> Finding:
    """starved_loader: more of each step is spent waiting for data than computing."""
    share = run.trace.wait_share
    return Finding(share > WAIT_SHARE, {"wait_share": share})


def frozen_layer(run: Run) -> Finding:
    """frozen_layer: a layer ended exactly where it started, though the network was alive.

    Left out of the optimizer, the layer received gradients and never moved;
    frozen with ``requires_grad=False``, it received none and never moved while
    its units fired. (Dead units get no gradient either, but they are silent.)
    """
    alive = f.inactive_share(run) <= DEAD_SHARE
    got_grad = {
        k for k, n in run.trace.weight_count.items() if run.trace.no_grad_weights.get(k, 0) < n
    }
    frozen = sorted(
        k
        for k in run.trace.weight_count
        if run.trace.weight_change.get(k, math.nan) == 0.0 and (k in got_grad or alive)
    )
    return Finding(
        bool(frozen),
        {
            "unmoved_layers": frozen,
            "weight_change": run.trace.weight_change,
            "inactive_share": f.inactive_share(run),
        },
    )


def no_gradient(run: Run) -> Finding:
    """dead_units: more than half of a layer's weights never received a gradient."""
    shares = f.no_grad_share(run)
    worst = max(shares.values(), default=0.0)
    return Finding(
        worst > DEAD_SHARE, {"no_grad_share": shares, "inactive_share": f.inactive_share(run)}
    )


def narrow_layer(run: Run) -> Finding:
    """too_small_model: a hidden layer narrower than the classes it must separate (a sequence
    model's narrower than :data:`MIN_SEQUENCE_WIDTH`: its vocabulary is no bound). A model of
    another kind has no classes to separate: its outputs are no bound on a hidden layer (an
    autoencoder's code is narrower than its output by design), so the rule stays silent and
    the memorization probe judges its capacity."""
    widths, classes = f.hidden_widths(run), f.n_classes(run)
    if not f.is_classes(run):
        return Finding(False, {"hidden_widths": list(widths), "outputs": classes})
    bound = MIN_SEQUENCE_WIDTH if f.is_sequence(run) else classes
    fired = bool(widths) and min(widths) < bound
    return Finding(fired, {"hidden_widths": list(widths), "n_classes": classes})


def labels_disagree(run: Run) -> Finding:
    """label_mismatch: the training labels are learned, validation is at or below chance."""
    val = f.final_val_acc(run)
    fired = learned_well(run) and math.isfinite(val) and val <= f.chance(run)
    return Finding(
        fired, {"train_acc": f.final_train_acc(run), "val_acc": val, "chance": f.chance(run)}
    )


def accumulating_gradient(run: Run) -> Finding:
    """missing_zero_grad: the gradient norm grows and its step noise dies out like a sum's."""
    growth, drop = f.grad_growth(run), f.grad_jitter_drop(run)
    fired = growth > 1.0 and drop < JITTER_DROP
    return Finding(fired, {"grad_growth": growth, "jitter_drop": drop})


def unstable(run: Run) -> Finding:
    """lr_too_high (candidate): updates far beyond 1e-3 of the weights, spikes, or divergence."""
    ratios, spikes, bad = f.update_ratio(run), f.spike_share(run), f.nonfinite_share(run)
    fired = max(ratios.values(), default=0.0) > UPDATE_RATIO or spikes > SPIKE_SHARE or bad > 0
    return Finding(fired, {"update_ratio": ratios, "spike_share": spikes, "nonfinite_share": bad})


def loss_floor(run: Run) -> Finding:
    """softmax_before_loss (candidate): the loss never went below the floor of a loss handed
    probabilities (ln(1 + (C-1)/e) for classes, softplus(-1) for labels); silent for a kind
    without such a floor."""
    losses, floor = f.finite_losses(run), f.probability_floor(run)
    lowest = float(losses.min()) if len(losses) else math.nan
    fired = math.isfinite(floor) and learned_well(run) and lowest >= floor * (1 - FLOOR_SLACK)
    return Finding(fired, {"min_loss": lowest, "probability_floor": floor})


# -- sequence models -----------------------------------------------------------------


def padding_in_loss(run: Run) -> Finding:
    """unmasked_loss: the padding's targets count in the loss (the Monitor was given a mask)."""
    share = f.padding_counted(run)
    return Finding(
        math.isfinite(share) and share > PADDING_COUNTED, {"padding_counted_share": share}
    )


def attends_ahead(run: Run) -> Finding:
    """causal_mask_missing: attention puts weight on later positions."""
    share = f.future_attention(run)
    return Finding(math.isfinite(share) and share > FUTURE_SHARE, {"future_attention": share})


def loss_multiplied(run: Run) -> Finding:
    """loss_normalization: the untrained model's loss is several times ln V (token ids cannot
    be huge inputs: the losses of several micro-batches were summed)."""
    first, lnv = f.first_loss(run), f.ln_c(run)
    fired = math.isfinite(first) and first > ACCUMULATED * lnv
    return Finding(fired, {"first_loss": first, "ln_v": lnv})


def copies_what_it_sees(run: Run) -> Finding:
    """labels_not_shifted: near-perfect teacher-forced tokens, yet greedy decoding writes almost
    no answer: trained to predict a token it is shown (and, attention causal, not the next)."""
    tokens, exact = f.final_token_acc(run), f.final_train_acc(run)
    fired = math.isfinite(tokens) and tokens >= COPY_TOKENS and exact <= COPY_EXACT
    return Finding(fired, {"val_token_acc": tokens, "train_exact_match": exact})


def tokens_behind_answers(run: Run) -> Finding:
    """unmasked_loss: the teacher-forced token accuracy is far below the answers' exact match.

    Every answer token that greedy decoding writes right is right teacher-forced too, so the
    labels count tokens that are not the answer's: the prompt's.
    """
    tokens, exact = f.final_token_acc(run), f.final_val_acc(run)
    fired = math.isfinite(tokens) and math.isfinite(exact) and tokens < exact - TOKEN_GAP
    return Finding(fired, {"val_token_acc": tokens, "val_exact_match": exact})


def restarted(run: Run) -> Finding:
    """resume_without_state: the rate's schedule starts over mid-run (it rises again after it
    had fallen), as a schedule rebuilt from a checkpoint that did not keep it does."""
    restarts = f.lr_restarts(run)
    return Finding(restarts > 0, {"lr_restarts": restarts})


#: Rules for a sequence model's run, read before the others, in the order they are trusted.
SEQUENCE: tuple[tuple[str, Callable[[Run], Finding]], ...] = (
    ("unmasked_loss", padding_in_loss),
    ("causal_mask_missing", attends_ahead),
    ("loss_normalization", loss_multiplied),
    ("labels_not_shifted", copies_what_it_sees),
    ("unmasked_loss", tokens_behind_answers),
    ("resume_without_state", restarted),
)

#: Rules that decide on the trace alone, in the order they are trusted.
PASSIVE: tuple[tuple[str, Callable[[Run], Finding]], ...] = (
    ("huge_inputs", loss_at_start),
    ("starved_loader", data_wait),
    ("frozen_layer", frozen_layer),
    ("dead_units", no_gradient),
    ("too_small_model", narrow_layer),
    ("label_mismatch", labels_disagree),
    ("missing_zero_grad", accumulating_gradient),
)


def failed_to_learn(run: Run) -> Finding:
    """other_fault (candidate): the run plainly did not work, whatever the reason.

    Training accuracy short of halfway from chance to perfect, or validation
    accuracy at or below chance, is no healthy run on any task: when none of
    the nine faults' rules explains it, the honest answer is "something else".
    """
    train, val = f.final_train_acc(run), f.final_val_acc(run)
    fired = not learned_well(run) or (math.isfinite(val) and val <= f.chance(run))
    return Finding(fired, {"train_acc": train, "val_acc": val, "chance": f.chance(run)})


def probe_verdict(run: Run, memo: Memorization, unstable_run: bool, floor_hit: bool) -> str:
    """The label once the memorization probe has run.

    The probe memorizes: model, data and loss work, so a failing run is its loop's
    doing (an unstable run, or one whose rate exceeds every sane rate and did not
    learn); a run that still did not learn is broken in a way no rule names
    (``other_fault``); otherwise it is healthy. The probe fails: the output or the
    capacity is at fault.
    """
    if memo.memorized:
        stalled = not learned_well(run) and run.config.lr > max(RATES)
        if unstable_run or stalled:
            return "lr_too_high"
        return OTHER_FAULT if failed_to_learn(run).fired else "healthy"
    return "softmax_before_loss" if floor_hit else "too_small_model"


@DIAGNOSERS.register("rules")
class RulesDiagnoser:
    """Relative-threshold rules plus a multi-rate memorization probe."""

    name = "rules"
    probes = True  # retrains the run through its probe
    tuned_on: frozenset[str] | set[str] = frozenset({"digits", "numbers"})

    def diagnose(self, run: Run) -> Diagnosis:
        """Name the first passive rule that fires (a sequence model's first), else ask the
        probe."""
        evidence: dict[str, Any] = {}
        rules = (*SEQUENCE, *PASSIVE) if f.is_sequence(run) else PASSIVE
        for label, rule in rules:
            finding = rule(run)
            evidence[rule.__name__] = finding.evidence
            if finding.fired:
                return _answer(label, rule.__name__, evidence)
        shaky, floor = unstable(run), loss_floor(run)
        evidence.update(unstable=shaky.evidence, loss_floor=floor.evidence)
        failed = failed_to_learn(run)
        evidence["failed_to_learn"] = failed.evidence
        if run.probe is None:  # a user's loop without a probe: trust the trace alone
            label = (
                "lr_too_high"
                if shaky.fired
                else "softmax_before_loss"
                if floor.fired
                else OTHER_FAULT
                if failed.fired
                else "healthy"
            )
            return _answer(label, "trace only", evidence)
        memo = memorize(run.probe)
        evidence["memorization"] = {
            "memorized": memo.memorized,
            "rate": memo.rate,
            "steps": memo.steps,
            "best_loss": memo.best_loss,
        }
        return _answer(probe_verdict(run, memo, shaky.fired, floor.fired), "memorization", evidence)


def _answer(label: str, decided_by: str, evidence: dict[str, Any]) -> Diagnosis:
    return Diagnosis(
        label, confidence=None, evidence={"decided_by": decided_by, **_clean(evidence)}
    )


def _clean(value: Any) -> Any:
    # Evidence goes into JSON reports that refuse nan: non-finite floats become None.
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        return finite_or_none(value)
    return value
