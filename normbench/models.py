"""MLP, CNN and RNN classifiers, each built from a norm constructor so any norm drops into any model.

    make = norms.factory("gn", groups=8)
    model = models.create(ModelConfig(name="cnn"), make, in_shape=(1, 28, 28), num_classes=10)
    logits = model(x)                 # x: (N, C, H, W); the RNN reads the H rows as time steps
    logits = model(x, lengths)        # variable-length batches: right-padded rows, lengths (N,)

A model never names a norm: it calls `make(num_features, layout)` for the activation norm and
`make.linear` / `make.conv2d` for the layer before it (WeightNorm and Cosine Norm change that layer).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from normbench import cells
from normbench.config import ModelConfig
from normbench.errors import UserError
from normbench.norms import LAYOUTS, NormFactory
from normbench.norms.batch import BatchNorm
from normbench.norms.batch_stats import BatchStatistics
from normbench.norms.registry import TAG
from normbench.transformer import Transformer


class MLP(nn.Module):
    """Flatten -> depth x [linear -> norm -> ReLU] -> linear classifier. (FRN and EvoNorm include their
    own activation, so `make.activation()` is the identity for them.)"""

    def __init__(self, cfg: ModelConfig, make: NormFactory, in_shape, num_classes: int):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = int(torch.tensor(in_shape).prod())
        for _ in range(cfg.depth):
            layers += [make.linear(width, cfg.hidden), make(cfg.hidden, "flat"), make.activation()]
            width = cfg.hidden
        layers += [nn.Dropout(cfg.dropout), nn.Linear(width, num_classes)]
        self.net = nn.Sequential(*layers)
        # Weights channels-last (convolutions then compute channels-last): torch's CPU convolution and
        # max-pool kernels are faster so (docs/performance.md: evaluation 1.5-1.8x, a training step
        # 1.07-1.42x), the values equal to 1e-12 in float64 (tests/test_models.py). Packs concatenate the
        # members' weights and keep the layout.
        self.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x)


class CNN(nn.Module):
    """Per stage: conv3x3 -> norm -> ReLU -> max-pool 2; then a two-layer classifier (no norm there)."""

    def __init__(self, cfg: ModelConfig, make: NormFactory, in_shape, num_classes: int):
        super().__init__()
        c, h, w = in_shape
        layers: list[nn.Module] = []
        for out in cfg.channels:
            layers += [make.conv2d(c, out, 3, padding=1), make(out, "image"), make.activation(),
                       nn.MaxPool2d(2)]
            c, h, w = out, h // 2, w // 2
        if h < 1 or w < 1:
            raise UserError(f"{len(cfg.channels)} conv stages pool a {in_shape[1]}x{in_shape[2]} image "
                            "to nothing", "use fewer model.channels")
        layers += [nn.Flatten(), nn.Linear(c * h * w, cfg.hidden), nn.ReLU(), nn.Dropout(cfg.dropout),
                   nn.Linear(cfg.hidden, num_classes)]
        self.net = nn.Sequential(*layers)
        # Weights channels-last (convolutions then compute channels-last): torch's CPU convolution and
        # max-pool kernels are faster so (docs/performance.md: evaluation 1.5-1.8x, a training step
        # 1.07-1.42x), the values equal to 1e-12 in float64 (tests/test_models.py). Packs concatenate the
        # members' weights and keep the layout.
        self.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x)


def length_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(N,) lengths -> (N, steps) bool mask, True on real steps (sequences are right-padded)."""
    return torch.arange(steps, device=lengths.device) < lengths[:, None]


class RNN(nn.Module):
    """Image rows as time steps: depth x [recurrent layer -> norm on its outputs], then a
    linear classifier on the output at each sequence's last real step. With model.placement=recurrent the
    norm sits inside the cell at every step instead (LN-RNN, recurrent BN; see cells.py)."""

    def __init__(self, cfg: ModelConfig, make: NormFactory, in_shape, num_classes: int):
        super().__init__()
        c, _, w = in_shape
        size = c * w
        self.layers, self.norms = nn.ModuleList(), nn.ModuleList()
        for _ in range(cfg.depth):
            self.layers.append(cells.recurrent_layer(cfg.cell, size, cfg.hidden, make, cfg.placement))
            self.norms.append(make(cfg.hidden, "seq") if cfg.placement == "output" else cells.Passthrough())
            size = cfg.hidden
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(size, num_classes)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        n, c, h, w = x.shape
        seq = x.permute(0, 2, 1, 3).reshape(n, h, c * w)  # (N, T=H, C*W)
        mask = None if lengths is None else length_mask(lengths, h)
        for layer, norm in zip(self.layers, self.norms):
            seq = norm(layer(seq, mask), mask)
        last = seq[:, -1] if lengths is None else seq[torch.arange(n, device=x.device), lengths - 1]
        return self.head(self.dropout(last))


_REGISTRY: dict[str, Callable[..., nn.Module]] = {"mlp": MLP, "cnn": CNN, "rnn": RNN, "transformer": Transformer}


def names() -> list[str]:
    return list(_REGISTRY)


def create(cfg: ModelConfig, make: NormFactory, in_shape, num_classes: int) -> nn.Module:
    """Build model `cfg.name` for inputs of shape `in_shape` (C, H, W)."""
    if cfg.name not in _REGISTRY:
        raise UserError(f"unknown model {cfg.name!r}", f"choose one of: {', '.join(names())}")
    return _REGISTRY[cfg.name](cfg, make, tuple(in_shape), num_classes)


@torch.no_grad()
def norm_values_per_channel(model: nn.Module, x: torch.Tensor) -> tuple[int | None, set[str]]:
    """(the fewest values any norm layer's per-channel statistics average over on input batch `x`, the
    layouts the norm layers take). Batch for linear layers, batch x H x W for convolutions, batch x T for
    sequences, batch for a per-step recurrent norm; K in place of the batch with ghost batches of K.
    BatchNorm's fate may depend on this number more than on the batch size. Measured in eval mode (no running-statistics update); None when there is no norm."""
    seen: list[int] = []
    layouts: set[str] = set()

    def count(module, args, _out):
        layout = getattr(module, TAG)[1]
        channels = args[0].shape[-1] if layout == "seq" else args[0].shape[1]
        values = args[0].numel() // channels
        ghost = module.ghost_batch if isinstance(module, BatchStatistics) else None  # groups of K samples
        positions = module.positions if isinstance(module, BatchNorm) else None  # k random positions per image
        if positions is not None:
            values = len(args[0]) * min(positions, values // len(args[0]))
        seen.append(values * ghost // len(args[0]) if ghost else values)

    hooks = []
    for module in model.modules():
        if hasattr(module, TAG) and getattr(module, TAG)[1] in LAYOUTS:  # not the "layer" of WN / CN
            layouts.add(getattr(module, TAG)[1])
            hooks.append(module.register_forward_hook(count))
    was_training = model.training
    try:
        model.eval()
        model(x)
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return (min(seen) if seen else None), layouts
