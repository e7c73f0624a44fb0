"""The feed-forward classifiers, MLP and CNN, built from a norm constructor so any norm drops into any model.

    model = MLP(ModelConfig(name="mlp"), norms.factory("bn"), in_shape=(1, 28, 28), num_classes=10)
    logits = model(x)                 # x: (N, C, H, W)

Each is one `nn.Sequential` (`net`): a pack (normbench.pack) swaps its layers for packed ones and keeps it.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.config import ModelConfig
from normbench.errors import UserError
from normbench.norms import NormFactory


class MLP(nn.Module):
    """Flatten -> depth x [linear -> norm -> ReLU] -> linear classifier. (FRN and EvoNorm include their
    own activation, so `make.activation()` is the identity for them.)"""

    member_axis = True  # a pack swaps `net` for its packed form (normbench.pack)

    def __init__(self, cfg: ModelConfig, make: NormFactory, in_shape, num_classes: int):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = int(torch.tensor(in_shape).prod())
        for _ in range(cfg.depth):
            layers += [make.linear(width, cfg.hidden), make(cfg.hidden, "flat"), make.activation()]
            width = cfg.hidden
        layers += [nn.Dropout(cfg.dropout), nn.Linear(width, num_classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x)


class CNN(nn.Module):
    """Per stage: conv3x3 -> norm -> ReLU -> max-pool 2; then a two-layer classifier (no norm there)."""

    member_axis = True  # a pack swaps `net` for its packed form (normbench.pack)

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
