"""The known faults, each in the forms it takes in real training scripts.

Their names are the labels a diagnoser answers. Each fault's variants live in
the module of the part they break (:mod:`.inputs`, :mod:`.models`,
:mod:`.optimization`, :mod:`.loading`), the bugs of training a language model
in :mod:`.language`; the first variant of each is its classic form: the one
the benchmark started with, which the classic grid runs. Registration order is
the order of the labels: the nine classifier faults, then the six of
sequence models (which say why they cannot apply to a classifier's task).

A fault takes another form in another kind of task (binary, multi-label,
regression, reconstruction: :mod:`faultbench.tasks.kinds`), a variant of the
same label; a form written for one kind says, on a task of another, why it
cannot apply and which form is the bug there.
"""

from __future__ import annotations

from faultbench.faults import inputs, language, loading, models, optimization
from faultbench.faults.fault import register

register(
    "missing_zero_grad",
    "gradients are not cleared before each backward pass, so they pile up across steps",
    *optimization.MISSING_ZERO_GRAD,
)
register(
    "huge_inputs",
    "inputs reach the model far off unit scale: not normalized, or scaled far up",
    *inputs.HUGE_INPUTS,
)
register(
    "lr_too_high",
    "the learning rate is far above the task's working rate",
    *optimization.LR_TOO_HIGH,
)
register(
    "dead_units",
    "hidden ReLU units are dead from initialization: they output 0 on every input",
    *models.DEAD_UNITS,
)
register(
    "starved_loader",
    "the data pipeline is the bottleneck: each step waits for its batch",
    *loading.STARVED_LOADER,
)
register(
    "too_small_model",
    "the model is far too small for the task: too narrow somewhere for what it must learn",
    *models.TOO_SMALL_MODEL,
)
register(
    "label_mismatch",
    "training and validation targets disagree: another class mapping, label order or row",
    *inputs.LABEL_MISMATCH,
)
register(
    "softmax_before_loss",
    "the output goes through an activation the loss does not expect (probabilities for logits)",
    *models.SOFTMAX_BEFORE_LOSS,
)
register(
    "frozen_layer",
    "a layer that should learn never changes: it is frozen by mistake",
    *optimization.FROZEN_LAYER,
)
register(
    "labels_not_shifted",
    "a language model's labels are not shifted: it is trained to copy the current token",
    *language.LABELS_NOT_SHIFTED,
)
register(
    "causal_mask_missing",
    "attention has no causal mask: training sees the future, greedy decoding fails",
    *language.CAUSAL_MASK_MISSING,
)
register(
    "unmasked_loss",
    "the loss counts tokens it should ignore: the padding, or the prompt",
    *language.UNMASKED_LOSS,
)
register(
    "loss_normalization",
    "micro-batch losses are normalized inconsistently: undivided, or per batch not per token",
    *language.LOSS_NORMALIZATION,
)
register(
    "resume_without_state",
    "training resumes from checkpoints without the optimizer's and the schedule's state",
    *language.RESUME_WITHOUT_STATE,
)
register(
    "leaky_split",
    "validation shares source units with training: its score is too good to be true",
    *language.LEAKY_SPLIT,
)
