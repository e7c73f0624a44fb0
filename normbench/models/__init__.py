"""The model registry: MLP, CNN (feedforward.py), a residual CNN (resnet.py), RNN (rnn.py, its cells in
cells.py) and Transformer (transformer.py), each built from a norm constructor so any norm drops into any model.

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

from normbench.config import ModelConfig
from normbench.errors import UserError
from normbench.models.feedforward import CNN, MLP
from normbench.models.resnet import ResNet
from normbench.models.rnn import RNN, length_mask
from normbench.models.transformer import Transformer
from normbench.norms import LAYOUTS, NormFactory
from normbench.norms.batch import BatchNorm
from normbench.norms.batch_stats import BatchStatistics
from normbench.norms.registry import TAG

_REGISTRY: dict[str, Callable[..., nn.Module]] = {"mlp": MLP, "cnn": CNN, "resnet": ResNet, "rnn": RNN,
                                                  "transformer": Transformer}
__all__ = ["CNN", "MLP", "RNN", "ResNet", "Transformer", "create", "length_mask", "names", "norm_values_per_channel",
           "validate"]


def names() -> list[str]:
    return list(_REGISTRY)


def validate(cfg: ModelConfig, make: NormFactory) -> None:
    """Is model `cfg.name` known, and do its options go together and with the norm `make` builds? Asked
    once, before any data is read (the runner's setup); `create` then builds without asking again."""
    if cfg.name not in _REGISTRY:
        raise UserError(f"unknown model {cfg.name!r}", f"choose one of: {', '.join(names())}")
    check = getattr(_REGISTRY[cfg.name], "check", None)  # the MLP and CNN have no options to cross-check
    if check is not None:
        check(cfg, make)


def create(cfg: ModelConfig, make: NormFactory, in_shape, num_classes: int) -> nn.Module:
    """Build model `cfg.name` (its options `validate`d) for inputs of shape `in_shape` (C, H, W)."""
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
