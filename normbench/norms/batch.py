"""BatchNorm (Ioffe & Szegedy 2015): statistics over the batch (and H, W / T) per channel.

On `seq` layout the statistics cover real tokens only when given a mask (PowerNorm's masked BN,
Shen et al. 2020); `masked=False` reproduces the naive layer whose statistics include the padding.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms.registry import NormSpec, register


class SeqBatchNorm(nn.BatchNorm1d):
    """BatchNorm over every real token of a (N, T, C) batch, per channel. Padding outputs are 0."""

    def __init__(self, num_features: int, *, masked: bool = True, **kwargs):
        super().__init__(num_features, **kwargs)
        self.masked = masked

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is None or not self.masked:
            return super().forward(x.reshape(-1, x.shape[-1])).reshape(x.shape)
        # Normalize the gathered real tokens with the native kernel, scatter them back.
        out = torch.zeros_like(x)
        out[mask] = super().forward(x[mask])
        return out

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, masked={self.masked}"


@register(NormSpec(
    name="bn", full_name="BatchNorm",
    stats_over="batch (+ H, W / + T) per channel; running stats at eval",
    batch_dependent=True, params="scale, shift per channel",
    paper="Ioffe & Szegedy 2015, arXiv 1502.03167",
))
def build_bn(num_features: int, layout: str, *, eps: float = 1e-5, momentum: float = 0.1,
             affine: bool = True, masked: bool = True) -> nn.Module:
    kw = dict(eps=eps, momentum=momentum, affine=affine)
    if layout == "flat":
        return nn.BatchNorm1d(num_features, **kw)
    if layout == "image":
        return nn.BatchNorm2d(num_features, **kw)
    return SeqBatchNorm(num_features, masked=masked, **kw)
