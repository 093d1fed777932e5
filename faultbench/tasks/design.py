"""Designs: the choices a practitioner makes when writing a training script, as data.

A :class:`Design` is one healthy recipe: the network (:class:`Network`) and how
it is trained (optimizer and rate, batch size, schedule, clipping, weight
decay). A :class:`Family` is the space of designs a practitioner would
plausibly write for a task, one tuple of values per axis, printable as it is
(``faultbench list`` shows it). Drawing a design from a family
(:func:`faultbench.faults.family.draw_design`) needs the measured working rate
of each optimizer, so it lives with the faults; everything here is plain data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field, fields
from typing import Any

ARCHITECTURES = ("mlp", "cnn", "gru", "transformer", "tabular")
OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")  # SGD always with momentum 0.9
ACTIVATIONS = ("relu", "leaky_relu", "gelu", "silu", "tanh")
NORMS = ("none", "batch", "layer")
INITS = ("default", "kaiming", "xavier", "orthogonal")
SCHEDULES = ("constant", "cosine", "one_cycle", "warmup_decay")
DOWNSAMPLES = ("pool", "stride")
CELLS = ("gru", "lstm")
#: How a run's batches arrive (faultbench.faults.batches): ready tensors, a DataLoader over a
#: TensorDataset, a Dataset with per-item work and a collate_fn, that Dataset behind a worker.
LOADERS = ("tensors", "dataloader", "dataset", "workers")
#: The weight decay each optimizer is usually given when it is given one (the decoupled
#: AdamW's default is 1e-2; coupled L2 in Adam, SGD and RMSprop is usually far smaller).
WEIGHT_DECAY = {"adam": 1e-4, "adamw": 1e-2, "sgd": 5e-4, "rmsprop": 1e-4}
CNN_CHANNELS = 8  # the reference CNN's one convolution
GRU_EMBED = 16  # the reference recurrent net's character embedding
GRU_STATE = 48  # and its state
HEADS = 4  # a transformer's attention heads, unless drawn otherwise


@dataclass(frozen=True)
class Network:
    """The model of a design: what a practitioner wrote in their ``nn.Module``."""

    architecture: str  # "mlp", "cnn" (images), "gru", "transformer" (token ids) or "tabular"
    # (categorical codes embedded beside numeric columns: a model of two inputs)
    widths: tuple[int, ...] = (64,)  # fully connected layers before the output; the last: hidden
    # (a transformer: one entry per block, each the residual stream's width, all equal)
    activation: str = "relu"  # after each hidden layer and convolution (ACTIVATIONS, or sigmoid)
    norm: str = "none"  # after each hidden layer and convolution: none, batch or layer
    dropout: float = 0.0  # after each hidden layer's activation
    init: str = "default"  # linear and convolution weights (INITS); biases 0 unless default
    channels: tuple[int, ...] = (CNN_CHANNELS,)  # cnn: output channels of each 3x3 convolution
    downsample: str = "pool"  # cnn: each convolution halves the image by pooling or by stride
    cell: str = "gru"  # gru: the recurrent cell, "gru" or "lstm"
    embed: int = GRU_EMBED  # gru: token embedding width; tabular: each code's embedding width
    state: int = GRU_STATE  # gru: recurrent state width
    heads: int = HEADS  # transformer: attention heads per block (they divide the width)

    def replace(self, **changes: Any) -> Network:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @property
    def hidden_names(self) -> tuple[str, ...]:
        """Module names of the fully connected hidden layers, first to last."""
        return (*(f"layer{i}" for i in range(1, len(self.widths))), "hidden")


@dataclass(frozen=True)
class Design:
    """One healthy recipe of a task: its network and how it is trained."""

    network: Network  # the model
    optimizer: str  # adam, adamw, sgd (momentum 0.9) or rmsprop
    lr: float  # the optimizer's rate (the schedule's peak)
    batch_size: int  # examples per update
    schedule: str = "constant"  # the rate over the run (SCHEDULES)
    clip: float = 0.0  # max norm of the gradient, clipped before each update; 0: no clipping
    weight_decay: float = 0.0  # the optimizer's weight decay
    momentum: float = 0.9  # SGD's momentum (the other optimizers have their own defaults)
    # How batches arrive (LOADERS); tensors: ready, at no cost. Out of repr, which a task's
    # fingerprint hashes for its written-out reference design: fingerprints keep their value.
    loader: str = field(default="tensors", repr=False)
    attempt: int = -1  # which draw of its seed it is (0 first); -1: not drawn (written by hand)

    def replace(self, **changes: Any) -> Design:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def with_network(self, **changes: Any) -> Design:
        """A copy whose network has some fields changed."""
        return self.replace(network=self.network.replace(**changes))

    @property
    def drawn(self) -> bool:
        """Whether it was drawn from a family (rather than written by hand)."""
        return self.attempt >= 0

    @property
    def digest(self) -> str:
        """A short hash of every choice: names the design in a path."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def axes(self) -> dict[str, Any]:
        """The value of every design axis, by axis name (what a per-axis table groups by)."""
        net = self.network
        out: dict[str, Any] = {
            "optimizer": self.optimizer,
            "depth": len(net.widths),
            "width": max(net.widths),
            "activation": net.activation,
            "norm": net.norm,
            "dropout": net.dropout,
            "batch_size": self.batch_size,
            "schedule": self.schedule,
            "clip": self.clip,
            "weight_decay": "on" if self.weight_decay > 0 else "off",
            "init": net.init,
            "loader": self.loader,
        }
        if net.architecture == "cnn":
            out |= {"convolutions": len(net.channels), "channels": min(net.channels)}
            out |= {"downsample": net.downsample}
        if net.architecture == "gru":
            out |= {"cell": net.cell, "state": net.state}
        if net.architecture == "tabular":
            out |= {"embed": net.embed}
        if net.architecture == "transformer":
            out |= {"heads": net.heads}
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (tuples become lists)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["network"] = {f.name: getattr(self.network, f.name) for f in fields(self.network)}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Design:
        """Inverse of :meth:`to_dict`."""
        net = dict(data["network"])
        net["widths"], net["channels"] = tuple(net["widths"]), tuple(net["channels"])
        return cls(**{**data, "network": Network(**net)})

    def describe(self) -> str:
        """One line: the choices that differ from a plain one-layer ReLU network."""
        net = self.network
        parts = [f"{self.optimizer} lr={self.lr:g}", f"batch {self.batch_size}"]
        if net.architecture == "cnn":
            parts.append(f"conv {'x'.join(map(str, net.channels))} {net.downsample}")
        if net.architecture == "gru":
            parts.append(f"{net.cell} {net.embed}/{net.state}")
        if net.architecture == "tabular":
            parts.append(f"codes embedded in {net.embed}")
        if net.architecture == "transformer":
            parts.append(f"{len(net.widths)} blocks of {max(net.widths)}, {net.heads} heads")
            parts.append(f"mlp {net.activation}")
        else:
            parts.append(f"fc {'-'.join(map(str, net.widths))} {net.activation}")
        parts += [net.norm + "norm"] if net.norm != "none" else []
        parts += [f"dropout {net.dropout:g}"] if net.dropout else []
        parts += [f"init {net.init}"] if net.init != "default" else []
        parts += [self.schedule] if self.schedule != "constant" else []
        parts += [f"clip {self.clip:g}"] if self.clip else []
        parts += [f"wd {self.weight_decay:g}"] if self.weight_decay else []
        parts += [f"loader {self.loader}"] if self.loader != "tensors" else []
        return ", ".join(parts)


@dataclass(frozen=True)
class Family:
    """The space of healthy designs a practitioner would plausibly write for a task.

    One tuple of values per axis; a draw picks each axis's value uniformly, the
    optimizer's rate is its measured working rate on the task
    (``faultbench/faults/rates.csv``) and its weight decay, when drawn, the
    optimizer's usual one (:data:`WEIGHT_DECAY`). The CNN and recurrent axes
    apply to tasks of that architecture only; every task draws its loader
    (:data:`LOADERS`: how batches arrive, as users write it), last.
    """

    architecture: str  # the task's: "mlp", "cnn" or "gru"
    optimizers: tuple[str, ...] = OPTIMIZERS  # each at its working rate for the task
    depths: tuple[int, ...] = (1, 2, 3, 4)  # fully connected hidden layers
    widths: tuple[int, ...] = (32, 64, 128, 256)  # each hidden layer's width, drawn per layer
    activations: tuple[str, ...] = ACTIVATIONS  # after every hidden layer and convolution
    norms: tuple[str, ...] = NORMS  # after every hidden layer and convolution
    dropouts: tuple[float, ...] = (0.0, 0.1, 0.3)  # after every hidden activation
    batch_sizes: tuple[int, ...] = (16, 32, 64, 128)  # examples per update
    schedules: tuple[str, ...] = SCHEDULES  # the rate over the run
    clips: tuple[float, ...] = (0.0, 1.0, 5.0)  # max gradient norm (0: none)
    weight_decays: tuple[str, ...] = ("off", "on")  # on: the optimizer's usual decay
    inits: tuple[str, ...] = INITS  # weights of linear and convolution layers
    convolutions: tuple[int, ...] = (1, 2)  # cnn: 3x3 convolutions
    channels: tuple[int, ...] = (4, 8, 16, 32)  # cnn: each convolution's channels
    downsamples: tuple[str, ...] = DOWNSAMPLES  # cnn: max-pooling or stride 2
    cells: tuple[str, ...] = CELLS  # gru: the recurrent cell
    embeds: tuple[int, ...] = (8, 16, 32)  # gru: token embedding width; tabular: a code's
    states: tuple[int, ...] = (32, 48, 96)  # gru: recurrent state width
    # transformer: attention heads per block. Out of repr, which every task's fingerprint
    # hashes: the tasks of other architectures keep theirs (a transformer task's fingerprint
    # hashes its axes() too).
    heads: tuple[int, ...] = field(default=(2, 4), repr=False)
    # How batches arrive (LOADERS), drawn last: every other axis of a draw is what it was
    # before the axis existed. Out of repr too, for the same reason as heads.
    loaders: tuple[str, ...] = field(default=LOADERS, repr=False)

    def axes(self) -> dict[str, tuple[Any, ...]]:
        """Every axis that applies to the architecture, with its values, in draw order.

        A transformer draws ``depths`` blocks of one width from ``widths`` (its residual
        stream), and its ``heads``.
        """
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "architecture"}
        if self.architecture != "cnn":
            for name in ("convolutions", "channels", "downsamples"):
                out.pop(name)
        if self.architecture != "gru":
            for name in ("cells", "states"):
                out.pop(name)
        if self.architecture not in ("gru", "tabular"):
            out.pop("embeds")
        if self.architecture != "transformer":
            out.pop("heads")
        return out


def reference_design(
    *,
    architecture: str,
    hidden: int,
    optimizer: str,
    lr: float,
    batch_size: int,
    momentum: float = 0.9,
) -> Design:
    """A task's reference recipe: one hidden layer, no schedule, normalization or clipping."""
    return Design(
        network=Network(architecture, widths=(hidden,)),
        optimizer=optimizer,
        lr=lr,
        batch_size=batch_size,
        momentum=momentum,
    )
