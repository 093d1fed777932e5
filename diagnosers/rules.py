"""``rules``: a rule-based diagnoser whose every threshold is relative to the run.

Each rule is one small function that reads the run and returns a
:class:`Finding` (fired or not, and the numbers it compared). Passive rules
read the trace only; when none of the decisive ones fires, a memorization
probe (:mod:`faultbench.scoring.memorize`) tells a loop that cannot
train a working model apart from a model or loss that cannot learn.

Written and tuned on digits only; its held-out score is measured on tasks it
was not written for. ``other_fault`` (a run that plainly failed, with no rule
to name why) was written from that principle alone, before any held-out-fault
run was looked at.

Each rule reads one number off the run (a :class:`~faultbench.scoring.budget.Statistic`)
and fires where that number reaches the rule's principled bound *and* lies beyond what
the healthy drawn runs of the tuned-on tasks reach at the rule's share of the
false-alarm budget (:mod:`faultbench.scoring.budget`); its evidence says how unusual
the value is. Where a probe is available, an alarm is raised only once the fix it
implies was tried for a few probe steps and measurably helped
(:mod:`faultbench.diagnosers._treatment`); otherwise the next rule is read. A run
whose learning cannot be judged yet (a single evaluation of its score: no trend) and
that would otherwise be called broken is ``undecided``.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from faultbench.diagnosers import _features as f
from faultbench.diagnosers._treatment import TREATMENTS, Treatment, hands_probabilities, treat
from faultbench.scoring.budget import Reading, Statistic, judge
from faultbench.scoring.diagnosis import DIAGNOSERS, UNDECIDED, Diagnosis, finite_or_none
from faultbench.scoring.memorize import RATES, memorize
from faultbench.scoring.run import Run
from faultbench.scoring.soundness import AT_CHANCE, MEMORIZATION

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
MIN_EVALUATIONS = 2  # evaluations of the score before a run's learning can be judged: a trend


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one run."""

    fired: bool  # whether the rule's signature is present
    evidence: dict[str, Any] = field(default_factory=dict)  # the numbers it compared
    readings: tuple[Reading, ...] = ()  # its statistics against the healthy runs
    # Whether the alarm may stand on its statistic where its fix cannot be tried (False: a
    # suspicion only, raised once its treatment measurably helps)
    alone: bool = True


def _found(reading: Reading, **numbers: Any) -> Finding:
    """A rule's finding from its statistic's reading, with the numbers behind it."""
    return Finding(reading.fired, {**numbers, "check": reading.evidence()}, (reading,))


# -- the statistics (larger is more unusual; -inf: the rule's premise does not hold) ------


def learned_well(run: Run) -> bool:
    """A classifier's training accuracy at least halfway from chance to perfect; on another
    kind, whose score's reachable level depends on its data (a regression's R²), the training
    loss's last tenth below :data:`LOSS_FALL` of its first tenth, the healthy bar's own test."""
    return not NOT_LEARNED.reaches(not_learned(run))


def not_learned(run: Run) -> float:
    """How far the run is from having learned (> 0: it has not): a classifier's training
    accuracy short of halfway from chance to perfect; another kind's loss fall over
    :data:`LOSS_FALL`; infinite where it cannot be read."""
    if f.is_classes(run):
        acc = f.final_train_acc(run)
        return (1.0 + f.chance(run)) / 2 - acc if math.isfinite(acc) else math.inf
    fell = f.loss_fell(run)
    return fell - LOSS_FALL if math.isfinite(fell) else math.inf


def unmoved_layers(run: Run) -> list[str]:
    """Layers that ended exactly where they started though the network was alive (or that
    received gradients: left out of the optimizer). Dead units get no gradient either, but
    they are silent."""
    alive = f.inactive_share(run) <= DEAD_SHARE
    got_grad = {
        k for k, n in run.trace.weight_count.items() if run.trace.no_grad_weights.get(k, 0) < n
    }
    return sorted(
        k
        for k in run.trace.weight_count
        if run.trace.weight_change.get(k, math.nan) == 0.0 and (k in got_grad or alive)
    )


def narrowness(run: Run) -> float:
    """A classifier's class count (a sequence model's :data:`MIN_SEQUENCE_WIDTH`) minus the
    fewest values a hidden layer passes on (> 0: fewer): a dense layer's width, a feature
    map's channels times what its reader takes of each
    (:func:`~faultbench.diagnosers._features.carried_widths`): the logits are a function
    of them, so fewer values than classes cannot score every class apart. NaN for a kind
    without classes."""
    if not f.is_classes(run):
        return math.nan
    widths = f.carried_widths(run)
    return float(_width_needed(run) - min(widths)) if widths else -math.inf


def few_channels(run: Run) -> float:
    """A classifier's class count minus the fewest channels of a feature map (a
    convolution's output: :func:`~faultbench.diagnosers._features.feature_maps`), > 0:
    fewer channels than classes; -inf without a map, NaN for a kind without classes.
    Channels are the kinds of feature a map detects at each position: fewer than the
    classes is a suspicion, not a bound (a healthy CNN often has fewer: what it passes on
    is its channels over its positions), so its alarm waits for the widening to help."""
    if not f.is_classes(run):
        return math.nan
    channels = f.feature_maps(run)
    return float(_width_needed(run) - min(channels)) if channels else -math.inf


def _width_needed(run: Run) -> int:
    return MIN_SEQUENCE_WIDTH if f.is_sequence(run) else f.n_classes(run)


def labels_at_chance(run: Run) -> float:
    """For a run that learned its training labels: chance minus its validation score."""
    if not learned_well(run):
        return -math.inf
    val = f.final_val_acc(run)
    return f.chance(run) - val if math.isfinite(val) else math.nan


def accumulation(run: Run) -> float:
    """For a run whose gradient norm grew: how many times its step noise fell (1 / the
    jitter drop); NaN where the trace is too short to tell."""
    return f.accumulation_of(f.total_grad_norm(run))


def largest_update(run: Run) -> float:
    """The largest layer's median update over its weights in the later half of the run so
    far (:func:`~faultbench.diagnosers._features.late_update_ratio`); NaN too early."""
    if not f.recorded_enough(run):
        return math.nan
    ratios = [v for v in f.late_update_ratio(run).values() if math.isfinite(v)]
    return max(ratios, default=0.0)


def nonfinite_steps(run: Run) -> float:
    """Steps whose loss is NaN or infinite."""
    return float(np.sum(~np.isfinite(run.trace.loss)))


def above_floor(run: Run) -> float:
    """For a run that learned: its lowest loss over the floor of a loss handed
    probabilities (NaN for a kind without such a floor)."""
    floor = f.probability_floor(run)
    if not math.isfinite(floor):
        return math.nan
    if not learned_well(run):
        return -math.inf
    losses = f.finite_losses(run)
    return float(losses.min()) / floor if len(losses) else math.nan


def summed_loss(run: Run) -> float:
    """A sequence model's first loss over ln V, where finite (a diverged first loss is huge
    inputs'); NaN for another run."""
    ratio = f.first_loss_ratio(run)
    return ratio if f.is_sequence(run) and math.isfinite(ratio) else math.nan


def answers_missed(run: Run) -> float:
    """For a sequence model whose teacher-forced tokens are near perfect: the share of its
    training answers greedy decoding misses."""
    tokens, exact = f.final_token_acc(run), f.final_train_acc(run)
    if math.isnan(tokens) or math.isnan(exact):
        return math.nan
    return 1.0 - exact if tokens >= COPY_TOKENS else -math.inf


def tokens_behind(run: Run) -> float:
    """The answers' exact match minus the teacher-forced token accuracy."""
    return f.final_val_acc(run) - f.final_token_acc(run)


def _enough(run: Run, value: float) -> float:
    """``value``, or NaN for a run too short to read a per-layer statistic off (a layer that
    got no gradient on one batch is not dead)."""
    return float(value) if f.recorded_enough(run) else math.nan


def _stat(
    name: str, read: Callable[[Run], float], bound: float, says: str, **how: bool
) -> Statistic:
    return Statistic(name, read, bound, how.get("per_kind", False), says, how.get("strict", False))


FIRST_LOSS = _stat(
    "first_loss", f.first_loss_ratio, START_FACTOR, "first loss / loss reference", strict=True
)
WAIT = _stat("wait_share", lambda r: r.trace.wait_share, WAIT_SHARE, "data wait share", strict=True)
UNMOVED = _stat("unmoved_layers", lambda r: _enough(r, len(unmoved_layers(r))), 1, "unmoved layers")
NO_GRAD = _stat(
    "no_grad_share",
    lambda r: _enough(r, max(f.no_grad_share(r).values(), default=0.0)),
    DEAD_SHARE,
    "largest share of a layer's weights never given a gradient",
    strict=True,
)
NARROW = _stat(
    "narrowness", narrowness, 1, "classes - fewest values a hidden layer passes on", per_kind=True
)
LABELS = _stat("labels_at_chance", labels_at_chance, 0.0, "chance - val score", per_kind=True)
ACCUMULATES = _stat(
    "accumulation", accumulation, 1 / JITTER_DROP, "fall of the step noise", strict=True
)
UPDATES = _stat(
    "update_ratio", largest_update, UPDATE_RATIO, "largest late median update/weight", strict=True
)
SPIKES = _stat(
    "spike_share", f.spike_share, SPIKE_SHARE, "late steps over 2x the first loss", strict=True
)
NONFINITE = _stat("nonfinite_steps", nonfinite_steps, 1, "steps with a non-finite loss")
FLOOR = _stat(
    "above_floor",
    above_floor,
    1 - FLOOR_SLACK,
    "lowest loss / probability floor",
    per_kind=True,
)
NOT_LEARNED = _stat(
    "not_learned",
    not_learned,
    0.0,
    "short of halfway, or loss fall - 0.8",
    per_kind=True,
    strict=True,
)
PADDING = _stat(
    "padding_counted",
    f.padding_counted,
    PADDING_COUNTED,
    "padding counted in the loss",
    per_kind=True,
    strict=True,
)
FUTURE = _stat(
    "future_attention",
    f.future_attention,
    FUTURE_SHARE,
    "attention on later positions",
    per_kind=True,
    strict=True,
)
SUMMED = _stat(
    "summed_loss", summed_loss, ACCUMULATED, "first loss / ln V", per_kind=True, strict=True
)
COPIES = _stat("answers_missed", answers_missed, 1 - COPY_EXACT, "answers missed", per_kind=True)
BEHIND = _stat(
    "tokens_behind", tokens_behind, TOKEN_GAP, "exact - token accuracy", per_kind=True, strict=True
)
RESTARTS = _stat("lr_restarts", lambda r: float(f.lr_restarts(r)), 1, "schedule restarts")


# -- the rules ----------------------------------------------------------------------------


def loss_at_start(run: Run) -> Finding:
    """huge_inputs: the untrained model's loss is far above where a sane initialization starts
    (ln C for classes, ln 2 per label, the targets' variance for a squared error), or not
    finite. Silent when the run's kind gives no such reference."""
    return _found(judge(FIRST_LOSS, run), first_loss=f.first_loss(run), loss_reference=f.ln_c(run))


def data_wait(run: Run) -> Finding:
    """starved_loader: more of each step is spent waiting for data than computing."""
    return _found(judge(WAIT, run), wait_share=run.trace.wait_share)


def frozen_layer(run: Run) -> Finding:
    """frozen_layer: a layer ended exactly where it started, though the network was alive.

    Left out of the optimizer, the layer received gradients and never moved;
    frozen with ``requires_grad=False``, it received none and never moved while
    its units fired. (Dead units get no gradient either, but they are silent.)
    """
    return _found(
        judge(UNMOVED, run),
        unmoved_layers=unmoved_layers(run),
        weight_change=run.trace.weight_change,
        inactive_share=f.inactive_share(run),
    )


def no_gradient(run: Run) -> Finding:
    """dead_units: more than half of a layer's weights never received a gradient."""
    return _found(
        judge(NO_GRAD, run),
        no_grad_share=f.no_grad_share(run),
        inactive_share=f.inactive_share(run),
    )


def narrow_layer(run: Run) -> Finding:
    """too_small_model: a hidden layer passes on fewer values than the classes it must
    separate (a sequence model's fewer than :data:`MIN_SEQUENCE_WIDTH`: its vocabulary is no
    bound), or, a suspicion its treatment must confirm, a convolution has fewer channels
    than the classes (:func:`few_channels`). A model of another kind has no classes to
    separate: its outputs are no bound on a hidden layer (an autoencoder's code is narrower
    than its output by design), so the rule stays silent and the memorization probe judges
    its capacity."""
    reading = judge(NARROW, run)
    numbers = {
        "hidden_widths": list(f.hidden_widths(run)),
        "carried_widths": list(f.carried_widths(run)),
        "n_classes": f.n_classes(run),
    }
    if reading.fired:
        return _found(reading, **numbers)
    channels = few_channels(run)
    suspected = channels >= 1
    numbers["feature_map_channels"] = list(f.feature_maps(run))
    return Finding(suspected, {**numbers, "check": reading.evidence()}, (reading,), not suspected)


def labels_disagree(run: Run) -> Finding:
    """label_mismatch: the training labels are learned, validation is at or below chance."""
    return _found(
        judge(LABELS, run),
        train_acc=f.final_train_acc(run),
        val_acc=f.final_val_acc(run),
        chance=f.chance(run),
    )


def accumulating_gradient(run: Run) -> Finding:
    """missing_zero_grad: the gradient norm grows and its step noise dies out like a sum's."""
    return _found(
        judge(ACCUMULATES, run), grad_growth=f.grad_growth(run), jitter_drop=f.grad_jitter_drop(run)
    )


def unstable(run: Run) -> Finding:
    """lr_too_high (candidate): updates far beyond 1e-3 of the weights, spikes, or divergence."""
    readings = tuple(judge(stat, run) for stat in (UPDATES, SPIKES, NONFINITE))
    return Finding(
        any(r.fired for r in readings),
        {
            "update_ratio": f.late_update_ratio(run),
            "spike_share": f.spike_share(run),
            "nonfinite_share": f.nonfinite_share(run),
            "checks": {r.check: r.evidence() for r in readings},
        },
        readings,
    )


def loss_floor(run: Run) -> Finding:
    """softmax_before_loss (candidate): the loss never went below the floor of a loss handed
    probabilities (ln(1 + (C-1)/e) for classes, softplus(-1) for labels); silent for a kind
    without such a floor."""
    losses = f.finite_losses(run)
    lowest = float(losses.min()) if len(losses) else math.nan
    return _found(judge(FLOOR, run), min_loss=lowest, probability_floor=f.probability_floor(run))


# -- sequence models -----------------------------------------------------------------


def padding_in_loss(run: Run) -> Finding:
    """unmasked_loss: the padding's targets count in the loss (the Monitor was given a mask)."""
    return _found(judge(PADDING, run), padding_counted_share=f.padding_counted(run))


def attends_ahead(run: Run) -> Finding:
    """causal_mask_missing: attention puts weight on later positions."""
    return _found(judge(FUTURE, run), future_attention=f.future_attention(run))


def loss_multiplied(run: Run) -> Finding:
    """loss_normalization: the untrained model's loss is several times ln V (token ids cannot
    be huge inputs: the losses of several micro-batches were summed)."""
    return _found(judge(SUMMED, run), first_loss=f.first_loss(run), ln_v=f.ln_c(run))


def copies_what_it_sees(run: Run) -> Finding:
    """labels_not_shifted: near-perfect teacher-forced tokens, yet greedy decoding writes almost
    no answer: trained to predict a token it is shown (and, attention causal, not the next)."""
    return _found(
        judge(COPIES, run),
        val_token_acc=f.final_token_acc(run),
        train_exact_match=f.final_train_acc(run),
    )


def tokens_behind_answers(run: Run) -> Finding:
    """unmasked_loss: the teacher-forced token accuracy is far below the answers' exact match.

    Every answer token that greedy decoding writes right is right teacher-forced too, so the
    labels count tokens that are not the answer's: the prompt's.
    """
    return _found(
        judge(BEHIND, run),
        val_token_acc=f.final_token_acc(run),
        val_exact_match=f.final_val_acc(run),
    )


def restarted(run: Run) -> Finding:
    """resume_without_state: the rate's schedule starts over mid-run (it rises again after it
    had fallen), as a schedule rebuilt from a checkpoint that did not keep it does."""
    return _found(judge(RESTARTS, run), lr_restarts=f.lr_restarts(run))


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

#: Every statistic rules reads, each with its share of the false-alarm budget.
STATISTICS = (
    FIRST_LOSS,
    WAIT,
    UNMOVED,
    NO_GRAD,
    NARROW,
    LABELS,
    ACCUMULATES,
    UPDATES,
    SPIKES,
    NONFINITE,
    FLOOR,
    NOT_LEARNED,
    AT_CHANCE,
    PADDING,
    FUTURE,
    SUMMED,
    COPIES,
    BEHIND,
    RESTARTS,
    MEMORIZATION,
)


def failed_to_learn(run: Run) -> Finding:
    """other_fault (candidate): the run plainly did not work, whatever the reason.

    Training accuracy short of halfway from chance to perfect, or validation
    accuracy at or below chance, is no healthy run on any task: when none of
    the nine faults' rules explains it, the honest answer is "something else".
    """
    short, at_chance = judge(NOT_LEARNED, run), judge(AT_CHANCE, run)
    return Finding(
        short.fired or at_chance.fired,
        {
            "train_acc": f.final_train_acc(run),
            "val_acc": f.final_val_acc(run),
            "chance": f.chance(run),
            "checks": {r.check: r.evidence() for r in (short, at_chance)},
        },
        (short, at_chance),
    )


def too_early(run: Run) -> bool:
    """Whether the run's learning cannot be judged yet: it logged a single evaluation of its
    score (fewer than :data:`MIN_EVALUATIONS`), so no trend shows. A loop that logs none
    is judged on what it has (its batch scores, its loss)."""
    return 0 < f.evaluations(run) < MIN_EVALUATIONS


def probe_verdict(run: Run, memorized: bool, unstable_run: bool, floor_hit: bool) -> str:
    """The label once the memorization probe has run.

    The probe memorizes: model, data and loss work, so a failing run is its loop's
    doing (an unstable run, or one whose rate exceeds every sane rate and did not
    learn); a run that still did not learn is broken in a way no rule names
    (``other_fault``), or undecided where its learning cannot be judged yet; otherwise
    it is healthy. The probe fails: the output or the capacity is at fault.
    """
    if memorized:
        stalled = not learned_well(run) and run.config.lr > max(RATES)
        if unstable_run or (stalled and not too_early(run)):
            return "lr_too_high"
        return _failed_label(run)
    return "softmax_before_loss" if floor_hit else "too_small_model"


def _failed_label(run: Run) -> str:
    if not failed_to_learn(run).fired:
        return "healthy"
    return UNDECIDED if too_early(run) else OTHER_FAULT


@DIAGNOSERS.register("rules")
class RulesDiagnoser:
    """Relative-threshold rules, calibrated against healthy runs, confirmed by treatment,
    plus a multi-rate memorization probe."""

    name = "rules"
    probes = True  # retrains the run through its probe
    tuned_on: frozenset[str] | set[str] = frozenset({"digits", "numbers", "diabetes"})

    def diagnose(self, run: Run) -> Diagnosis:
        """Name the first passive rule that fires and whose fix helps (a sequence model's
        first), else ask the probe."""
        evidence: dict[str, Any] = {}
        rules = (*SEQUENCE, *PASSIVE) if f.is_sequence(run) else PASSIVE
        for label, rule, _ in raised(run, rules, evidence):
            return _answer(label, rule, evidence)
        shaky, floor = unstable(run), loss_floor(run)
        evidence.update(unstable=shaky.evidence, loss_floor=floor.evidence)
        evidence["failed_to_learn"] = failed_to_learn(run).evidence
        if run.probe is None:  # a user's loop without a probe: trust the trace alone
            label = (
                "lr_too_high"
                if shaky.fired
                else "softmax_before_loss"
                if floor.fired
                else _failed_label(run)
            )
            return _answer(label, "trace only", evidence)
        memo = memorize(run.probe)
        reading = judge(MEMORIZATION, run, value=memo.ratio)
        evidence["memorization"] = {
            "memorized": not reading.fired,
            "rate": memo.rate,
            "steps": memo.steps,
            "best_loss": memo.best_loss,
            "ratio": memo.ratio,
            "check": reading.evidence(),
        }
        probabilities = reading.fired and hands_probabilities(run)  # failed: is it the output?
        evidence["memorization"]["hands_probabilities"] = probabilities
        label = probe_verdict(run, not reading.fired, shaky.fired, floor.fired or probabilities)
        if label in ("lr_too_high", "softmax_before_loss", "too_small_model"):
            memorized = evidence["memorization"]
            # A model that cannot memorize is too small only if widening it helps: where the
            # probe cannot widen it, the failure is no evidence of its width.
            alone = label != "too_small_model"
            held = _confirmed(label, run, Finding(True, memorized, alone=alone), memorized)
            label = label if held else _failed_label(run)
        return _answer(label, "memorization", evidence)


def raised(
    run: Run,
    rules: tuple[tuple[str, Callable[[Run], Finding]], ...],
    evidence: dict[str, Any],
) -> Iterator[tuple[str, str, Finding]]:
    """(label, rule name, finding) of each rule of ``rules`` that fires on ``run`` and whose
    alarm stands (:func:`_confirmed`), in order; every rule read puts its finding's
    evidence in ``evidence`` under its name, with the treatment tried."""
    for label, rule in rules:
        finding = rule(run)
        evidence[rule.__name__] = finding.evidence
        if finding.fired and _confirmed(label, run, finding, evidence[rule.__name__]):
            yield label, rule.__name__, finding


def early_rules(run: Run) -> tuple[tuple[str, Callable[[Run], Finding]], ...]:
    """The rules that can judge a run still training: the passive ones and the instability
    candidate. Not the probability floor's (a loss still above the floor may yet go
    below it) nor the failure to learn (the run may yet learn)."""
    passive = (*SEQUENCE, *PASSIVE) if f.is_sequence(run) else PASSIVE
    return (*passive, ("lr_too_high", unstable))


def _confirmed(label: str, run: Run, finding: Finding, evidence: dict[str, Any]) -> bool:
    """Whether the alarm ``label`` stands: its treatment measurably helped, or none could be
    tried (no probe, no treatment for it, a fix the probe cannot build) and the finding may
    stand on its statistic alone; the treatment goes into ``evidence`` either way."""
    tried: Treatment | None = treat(label, run, finding.evidence)
    if tried is not None:
        evidence["treatment"] = tried.evidence()
        return tried.helped
    why = (
        "no probe"
        if run.probe is None
        else f"no treatment for {label}"
        if label not in TREATMENTS
        else "the probe cannot try its fix on this model"
    )
    said = "raised on its statistic alone" if finding.alone else "a suspicion only, not raised"
    evidence["treatment"] = {"said": f"{why}: {said}"}
    return finding.alone


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
