"""Quantities read off a run's trace, each relative to the run itself.

Shared by the rule-based and the learned diagnosers. Every number here is
scaled by something the run supplies (ln C, chance accuracy, the run's own
early values, a layer's own weight count), so that no value fitted to one
task's absolute scale leaks into a rule.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from faultbench.scoring.run import Run


def n_classes(run: Run) -> int:
    """Width of the model's last layer: the number of classes (outputs, for another kind)."""
    return max(2, int(run.config.n_classes))


def ln_c(run: Run) -> float:
    """The loss a sane initialization starts near: ln C for C classes, ln 2 for a logits
    loss of labels, the targets' variance for a squared error (the kind's reference,
    :attr:`~faultbench.training.trace.RunConfig.start_loss`); NaN where it is not known."""
    return run.config.start_loss


def chance(run: Run) -> float:
    """The task score of a constant predictor (one class in C for a run of unknown kind)."""
    return run.config.chance_level


def is_classes(run: Run) -> bool:
    """Whether the run scores one class of several per example or position (its output's
    argmax is its answer): a multi-class or sequence run, or one of unknown kind with
    several outputs."""
    return run.config.kind in ("", "multiclass", "next_token") and run.config.n_classes >= 2


def softmax_floor(classes: int) -> float:
    """Smallest cross-entropy reachable when the "logits" are probabilities in [0, 1].

    The best case puts 1 on the right class and 0 elsewhere:
    ``-log(e / (e + C - 1)) = ln(1 + (C - 1) / e)``.
    """
    return math.log(1.0 + (classes - 1) / math.e)


#: The smallest binary cross-entropy of logits reachable when the "logits" are probabilities
#: in [0, 1]: a positive label's loss is at least softplus(-1), a negative one's softplus(0).
SIGMOID_FLOOR = math.log1p(math.exp(-1.0))


def probability_floor(run: Run) -> float:
    """The lowest loss a run reaches when its loss is handed probabilities where it expects
    logits: the softmax floor for classes, softplus(-1) for a logits loss of labels (its
    smallest per-label value); NaN for a kind without one (a squared error)."""
    if is_classes(run):
        return softmax_floor(n_classes(run))
    if run.config.kind in ("binary", "multilabel"):
        return SIGMOID_FLOOR
    return math.nan


def first_loss(run: Run) -> float:
    """Loss of the first batch, before any update (nan for an empty trace)."""
    return float(run.trace.loss[0]) if run.trace.steps else math.nan


def finite_losses(run: Run) -> np.ndarray:
    """The finite per-step losses."""
    loss = run.trace.loss
    return loss[np.isfinite(loss)]


def nonfinite_share(run: Run) -> float:
    """Share of steps whose loss is nan or infinite (a diverged run)."""
    return float(np.mean(~np.isfinite(run.trace.loss))) if run.trace.steps else 0.0


def last(values: np.ndarray) -> float:
    """The last finite entry of an evaluation series (nan when there is none)."""
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if len(finite) else math.nan


#: Share of the run's last steps whose batch accuracies stand in for a missing evaluation.
LATE_SHARE = 0.1


def loss_fell(run: Run) -> float:
    """The training loss's last tenth over its first tenth (means of the finite losses): the
    healthy bar's test of learning, for any kind (below 0.8: it learned)."""
    losses = finite_losses(run)
    if len(losses) < 2:
        return math.nan
    n = max(1, len(losses) // 10)
    start = float(losses[:n].mean())
    return float(losses[-n:].mean()) / start if start > 0 else math.nan


def final_train_acc(run: Run) -> float:
    """Training accuracy (the task's score) at the last evaluation.

    A user's loop that never called ``log_eval`` but gave ``Monitor.step`` its
    output and target still has a training accuracy: the mean batch accuracy
    over the last tenth of its steps (a single batch is too noisy to read).
    """
    logged = last(run.trace.train_acc)
    if math.isfinite(logged):
        return logged
    batches = run.trace.batch_acc[np.isfinite(run.trace.batch_acc)]
    if not len(batches):
        return math.nan
    late = batches[-max(1, int(len(batches) * LATE_SHARE)) :]
    return float(late.mean())


def final_val_acc(run: Run) -> float:
    """Validation accuracy at the last evaluation."""
    return last(run.trace.val_acc)


def no_grad_share(run: Run) -> dict[str, float]:
    """Per layer: share of its weights that never received a gradient."""
    counts = run.trace.weight_count
    return {k: run.trace.no_grad_weights.get(k, 0) / n for k, n in counts.items() if n > 0}


def hidden_widths(run: Run) -> tuple[int, ...]:
    """Widths of the layers between input and output (a convolution's: its channels)."""
    return tuple(run.config.layer_widths[1:-1])


def carried_widths(run: Run) -> tuple[int, ...]:
    """What each hidden layer passes on: how many of its values one unit of the next layer
    reads. A dense layer's width, where a dense layer reads it; a feature map's channels
    times the values per channel its reader takes in (the positions a dense layer reads
    flattened, a convolution's kernel area). A convolution's channels are features per
    position, not a bottleneck of width: four channels over 36 positions carry 144 values.

    Read off the recorded widths and each layer's weight count (a layer reading F values
    per unit of ``a`` units into ``b`` holds ``F * a * b`` weights, plus ``b`` biases);
    where no count fits, the recorded width."""
    widths = run.config.layer_widths
    reads = per_unit_reads(widths, list(run.trace.weight_count.values()))
    return tuple(w * max(1, reads[k]) for k, w in enumerate(widths[1:-1], start=1))


def feature_maps(run: Run) -> tuple[int, ...]:
    """The channels of each hidden layer whose next layer reads several of its values per
    unit (a feature map: a convolution's output), in order."""
    widths = run.config.layer_widths
    reads = per_unit_reads(widths, list(run.trace.weight_count.values()))
    return tuple(w for k, w in enumerate(widths[1:-1], start=1) if reads[k] > 1)


def per_unit_reads(widths: tuple[int, ...], counts: list[int]) -> list[int]:
    """For each layer ``k`` of ``widths`` (the first layer's input, then each layer's
    output): how many values per unit of layer ``k`` the next layer reads (1 for a dense
    layer; 0 for the last, or where no weight count fits). The counts are matched to the
    layers in order; a normalization's count (one or two per unit of the layer before) is
    passed over where a later count fits."""
    found, start = [0] * len(widths), 0
    for k in range(1, len(widths)):
        fit = _fitting(widths[k - 1], widths[k], counts, start)
        if fit is not None:
            found[k - 1], start = fit[0], fit[1] + 1
    return found


def _fitting(before: int, out: int, counts: list[int], start: int) -> tuple[int, int] | None:
    """(values read per unit of ``before``, index) of the first count from ``start`` that a
    layer of ``out`` units reading ``before`` units can hold, a normalization's last."""
    fits = [(i, _per_unit(c, before, out)) for i, c in enumerate(counts) if i >= start]
    fits = [(i, factor) for i, factor in fits if factor]
    plain = [(i, factor) for i, factor in fits if counts[i] not in (before, 2 * before)]
    for i, factor in plain or fits:
        return factor, i
    return None


def _per_unit(count: int, before: int, out: int) -> int:
    """The values per unit of ``before`` a layer of ``count`` weights into ``out`` reads, or
    0 where none does (biases first: ``out`` of them, or none)."""
    for weights in (count - out, count):
        if before > 0 and out > 0 and weights > 0 and weights % (before * out) == 0:
            return weights // (before * out)
    return 0


def total_grad_norm(run: Run) -> np.ndarray:
    """Per recorded step: the L2 norm of the whole model's gradient."""
    norms = [np.asarray(v, dtype=np.float64) for v in run.trace.grad_norm.values()]
    if not norms:
        return np.zeros(run.trace.steps)
    return np.sqrt(np.sum([n**2 for n in norms], axis=0))


def _window(n: int) -> int:
    # A tenth of the run, at least a few steps, so medians are not one batch's noise.
    return max(3, n // 10)


def grad_growth(run: Run) -> float:
    """Median gradient norm of the last tenth over that of the first tenth."""
    return growth_of(total_grad_norm(run))


def growth_of(norms: np.ndarray) -> float:
    """:func:`grad_growth` of a series of gradient norms."""
    g = norms[np.isfinite(norms)]
    if len(g) < 6:
        return math.nan
    w = _window(len(g))
    early = float(np.median(g[:w]))
    return float(np.median(g[-w:])) / early if early > 0 else math.nan


def grad_jitter_drop(run: Run) -> float:
    """Step-to-step relative change of the gradient norm, late over early.

    Independent batch gradients keep the relative change roughly constant
    through a run. A gradient that accumulates (``G_t = G_{t-1} + g_t``) is a
    sum of t terms, so its relative change shrinks like 1/t: between the first
    tenth and the second half of a run, t grows at least five-fold.
    """
    return jitter_drop_of(total_grad_norm(run))


def jitter_drop_of(g: np.ndarray) -> float:
    """:func:`grad_jitter_drop` of a series of gradient norms."""
    if len(g) < 20 or not np.all(np.isfinite(g)) or np.any(g <= 0):
        return math.nan
    rel = np.abs(np.diff(g)) / g[1:]
    early = float(np.median(rel[: _window(len(rel))]))
    late = float(np.median(rel[len(rel) // 2 :]))
    return late / early if early > 0 else math.nan


def accumulation_of(norms: np.ndarray) -> float:
    """For a series of gradient norms that grew: how many times its step noise fell (1 / the
    jitter drop; -inf where the norm did not grow); NaN where it is too short to tell."""
    growth, drop = growth_of(norms), jitter_drop_of(norms)
    if math.isnan(growth) or math.isnan(drop):
        return math.nan
    if growth <= 1.0:
        return -math.inf
    return 1.0 / drop if drop > 0 else math.inf


#: Recorded steps a statistic over them needs: fewer are one or two batches' noise (a run's
#: first updates, or a check early in a run).
MIN_RECORDED = 5


def recorded_enough(run: Run) -> bool:
    """Whether the run recorded at least :data:`MIN_RECORDED` steps of per-layer statistics."""
    return len(run.trace.stat_steps) >= MIN_RECORDED


def late_update_ratio(run: Run) -> dict[str, float]:
    """Per layer: median |update| / |weights| over the later half of the recorded steps (an
    optimizer's first updates are large against freshly initialized weights: Adam's are
    the rate itself in every coordinate); empty with fewer than :data:`MIN_RECORDED`."""
    if not recorded_enough(run):
        return {}
    out = {}
    for name, values in run.trace.update_ratio.items():
        late = values[len(values) // 2 :]
        finite = late[np.isfinite(late)]
        out[name] = float(np.median(finite)) if len(finite) else math.nan
    return out


def update_ratio(run: Run) -> dict[str, float]:
    """Per layer: median |update| / |weights| over the run's finite steps."""
    out = {}
    for name, values in run.trace.update_ratio.items():
        finite = values[np.isfinite(values)]
        out[name] = float(np.median(finite)) if len(finite) else math.nan
    return out


def spike_share(run: Run) -> float:
    """Share of steps after the first quarter whose loss exceeds twice the first loss.

    Once training is under way, a batch loss far above the untrained model's
    is the model being thrown out of the region it had found.
    """
    start = first_loss(run)
    loss = run.trace.loss[run.trace.steps // 4 :]
    if not math.isfinite(start) or len(loss) == 0:
        return math.nan
    return float(np.mean(~np.isfinite(loss) | (loss > 2 * start)))


def inactive_share(run: Run) -> float:
    """Median share of hidden units silent on a whole batch."""
    values = run.trace.inactive_share
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if len(finite) else 0.0


# -- sequence models (a language model's run: the Monitor got per-token targets) ----------


def is_sequence(run: Run) -> bool:
    """Whether the run recorded per-token targets (the share of them counted in the loss)."""
    return bool(np.isfinite(run.trace.counted_share).any())


def _finite_mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else math.nan


def padding_counted(run: Run) -> float:
    """Mean share of padding positions whose target counted in the loss (nan: no mask given)."""
    return _finite_mean(run.trace.padding_counted_share)


def future_attention(run: Run) -> float:
    """The largest mean share of attention on later positions, over the attention modules."""
    means = [_finite_mean(v) for v in run.trace.attention_future.values()]
    return max((m for m in means if math.isfinite(m)), default=math.nan)


def final_token_acc(run: Run) -> float:
    """Teacher-forced validation token accuracy at the last evaluation."""
    return last(run.trace.val_token_acc)


RESTART_RISE = 0.1  # a rise of at least a tenth of the peak rate (a cosine decay computed one
# step past its end rises by a millionth of it)


def lr_restarts(run: Run) -> int:
    """Times the rate rises again, by at least :data:`RESTART_RISE` of its peak, after it had
    fallen (a schedule started over)."""
    return restarts(run.trace.lr)


def restarts(lr: np.ndarray) -> int:
    """The count of :func:`lr_restarts` on a series of rates."""
    lr = lr[np.isfinite(lr)]
    if len(lr) < 3:
        return 0
    rise, count, low, fell = RESTART_RISE * float(lr.max()), 0, math.inf, False
    for before, now in itertools.pairwise(lr):
        if now < before:
            fell, low = True, min(low, float(now))
        elif fell and now - low >= rise:
            count, fell, low = count + 1, False, math.inf
    return count


# -- the statistics the doctor's checks calibrate (faultbench.scoring.budget) ----------------


def first_loss_ratio(run: Run) -> float:
    """The first loss over the loss an untrained model starts near (:func:`ln_c`): infinite
    for a first loss that is not finite, NaN where the kind gives no reference."""
    first, reference = first_loss(run), ln_c(run)
    if not math.isfinite(reference) or reference <= 0:
        return math.nan
    return first / reference if math.isfinite(first) else math.inf


def evaluations(run: Run) -> int:
    """Evaluations of the task's score the run logged (finite validation scores)."""
    return int(np.isfinite(run.trace.val_acc).sum())


def has_step_scores(run: Run) -> bool:
    """Whether the run recorded a score for its batches (``Monitor.step`` got outputs)."""
    return bool(np.isfinite(run.trace.batch_acc).any())
