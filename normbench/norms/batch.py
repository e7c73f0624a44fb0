"""BatchNorm (Ioffe & Szegedy 2015): statistics over the batch (and H, W / T) per channel.

    bn = norms.create("bn", 64, "seq")        # forward(x, mask): statistics over real tokens only
    bn = norms.create("bn", 64, "seq", masked=False)   # naive: the padding is counted too

On `seq` layout the statistics cover real tokens only when given a mask (PowerNorm's masked BN,
Shen et al. 2020); `masked=False` reproduces the naive layer whose statistics include the padding.
`impl="scratch"` selects the from-scratch twin in scratch.py, checked equal to this one.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from normbench.norms.common import batch_seq, check_batch_values, masked_moments, update_running
from normbench.norms.registry import NormSpec, check_impl, register


class BatchNorm(_BatchNorm):
    """torch's BatchNorm kernel for every layout: (N, C), (N, C, H, W), and (N, T, C) with a padding mask."""

    def __init__(self, num_features: int, layout: str, *, masked: bool = True, **kwargs):
        super().__init__(num_features, **kwargs)
        self.layout, self.masked = layout, masked

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if self.training:
            check_batch_values(x, "BatchNorm")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.layout != "seq":
            return super().forward(x)
        return batch_seq(x, mask, self.masked, super().forward, self._weighted, self.training)

    def _weighted(self, xf: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """Statistics over the rows with w = 1 (the accelerator path: no data-dependent shapes)."""
        if not self.training:
            return super().forward(xf) * w
        mean, var, n = masked_moments(xf, w)
        self.num_batches_tracked.add_(1)
        update_running(self.running_mean, self.running_var, mean, var, n, self.momentum)
        y = (xf - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            y = torch.addcmul(self.bias, y, self.weight)
        return y * w

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, layout={self.layout}, masked={self.masked}"


@register(NormSpec(
    name="bn", full_name="BatchNorm",
    stats_over="batch (+ H, W / + T) per channel; running stats at eval",
    batch_dependent=True, params="scale, shift per channel",
    paper="Ioffe & Szegedy 2015, arXiv 1502.03167",
))
def build_bn(num_features: int, layout: str, *, eps: float = 1e-5, momentum: float = 0.1,
             affine: bool = True, masked: bool = True, impl: str = "native") -> nn.Module:
    if check_impl(impl) == "scratch":
        from normbench.norms.scratch import ScratchBatchNorm

        return ScratchBatchNorm(num_features, layout, eps=eps, momentum=momentum, affine=affine, masked=masked)
    return BatchNorm(num_features, layout, eps=eps, momentum=momentum, affine=affine, masked=masked)
