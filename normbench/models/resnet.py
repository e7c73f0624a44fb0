"""A CIFAR-style residual CNN, `model=resnet` (He et al. 2016, "Deep Residual Learning for Image
Recognition", arXiv 1512.03385, section 4.2), built from a norm constructor so any image norm drops in.

    stem: conv3x3 -> norm -> ReLU                                  (model.channels[0] channels)
    per stage s (one per model.channels entry), model.depth blocks, each
        relu(conv3x3 -> norm -> ReLU -> conv3x3 -> norm  +  skip(x))
      the first block of every stage after the first halves H and W (stride 2) and widens to channels[s];
      its skip is then a 1x1 convolution (stride 2) -> norm (He et al.'s option B), else the identity
    global average pool -> dropout -> linear classifier

    model = ResNet(ModelConfig(name="resnet"), norms.factory("gn"), in_shape=(3, 32, 32), num_classes=10)
    logits = model(x)                 # x: (N, C, H, W)

With `model.depth` blocks per stage and three stages there are 6 depth + 2 weighted layers: depth 1 is an
8-layer network, 3 is He et al.'s ResNet-20. Every norm is `make(C, "image")` after `make.conv2d(...)`,
and every ReLU is `make.activation()`: the identity for FRN and EvoNorm, whose norms include their own
activation, so with them a block is conv -> norm(+its activation) -> conv -> norm(+its activation) + skip,
with nothing after the sum. The convolutions keep their bias, as the CNN's: a norm that subtracts a mean
cancels it, and norm=none and the reparameterizing norms (WN, CN) keep a shift. Weights are
channels-last, as the CNN's (torch's CPU convolutions are faster so).

Packing (normbench.pack): the model and its blocks declare `member_axis`: their forwards index from the
end (the pooling averages dims -2 and -1), and every convolution and norm sits in an `nn.Sequential`,
so a pack swaps the layers and keeps these forwards; the skip's sum and the ReLU after it run on the
members-first layout (S, N, C, H, W) the packed branches return.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.config import ModelConfig
from normbench.errors import UserError
from normbench.norms import NormFactory


class ResidualBlock(nn.Module):
    """A basic residual block: act(body(x) + skip(x)), body = conv3x3 -> norm -> act -> conv3x3 -> norm,
    skip = the identity, or conv1x1 -> norm where the block changes the shape (stride or width)."""

    member_axis = True  # its forward adds and rectifies, on any leading axes: a pack swaps its branches' layers

    def __init__(self, c_in: int, c_out: int, stride: int, make: NormFactory):
        super().__init__()
        self.body = nn.Sequential(make.conv2d(c_in, c_out, 3, stride=stride, padding=1), make(c_out, "image"),
                                  make.activation(),
                                  make.conv2d(c_out, c_out, 3, padding=1), make(c_out, "image"))
        if stride != 1 or c_in != c_out:
            self.skip = nn.Sequential(make.conv2d(c_in, c_out, 1, stride=stride), make(c_out, "image"))
        else:
            self.skip = nn.Identity()
        self.act = make.activation()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + self.skip(x))


class ResNet(nn.Module):
    """Stem, len(model.channels) stages of model.depth residual blocks, global average pool, linear."""

    member_axis = True  # its forward indexes from the end: a pack swaps its layers (normbench.pack)

    @staticmethod
    def check(cfg: ModelConfig, make: NormFactory) -> None:
        """Its options, before any data is read (`models.validate`)."""
        if not cfg.channels:
            raise UserError("model.channels is empty: the resnet has one stage per entry",
                            "e.g. model.channels=[16,32,64]")
        if cfg.depth is None or cfg.depth < 1:
            raise UserError(f"model.depth={cfg.depth}: the resnet needs at least one block per stage",
                            "use model.depth=1 or more (3 is ResNet-20)")

    def __init__(self, cfg: ModelConfig, make: NormFactory, in_shape, num_classes: int):
        super().__init__()
        self.check(cfg, make)
        c = in_shape[0]
        width = cfg.channels[0]
        self.stem = nn.Sequential(make.conv2d(c, width, 3, padding=1), make(width, "image"), make.activation())
        stages = []
        for s, out in enumerate(cfg.channels):
            blocks = []
            for b in range(cfg.depth):
                blocks.append(ResidualBlock(width, out, 2 if s > 0 and b == 0 else 1, make))
                width = out
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(width, num_classes)
        self.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(self.dropout(x.mean((-2, -1))))  # global average pool: (..., C, H, W) -> (..., C)
