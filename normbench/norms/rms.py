"""RMSNorm (Zhang & Sennrich 2019): LayerNorm without re-centering, a_i / RMS(a) * g_i.

    rms = norms.create("rms", 64, "seq")      # per token over its C features

Statistics over the same features as LN (C; C, H, W for images). The paper's gain g is per channel; its
optional bias is off, as in the paper's experiments. eps 1e-8 as in the authors' code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from normbench.norms.common import TokenWise
from normbench.norms.registry import NormSpec, register


class ImageRMSNorm(nn.Module):
    """RMS over (C, H, W) of each sample with torch's rms_norm kernel, then a gain per channel."""

    def __init__(self, num_features: int, *, eps: float, affine: bool):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = F.rms_norm(x, x.shape[1:], eps=self.eps)
        return y if self.weight is None else y * self.weight.view(1, -1, 1, 1)


@register(NormSpec(
    name="rms", full_name="RMSNorm",
    stats_over="like LN (C per token; C,H,W per image), no centering",
    batch_dependent=False, params="scale per channel",
    paper="Zhang & Sennrich 2019, arXiv 1910.07467",
))
def build_rms(num_features: int, layout: str, *, eps: float = 1e-8, affine: bool = True) -> nn.Module:
    if layout == "image":
        return ImageRMSNorm(num_features, eps=eps, affine=affine)
    norm = nn.RMSNorm(num_features, eps=eps, elementwise_affine=affine)
    return TokenWise(norm) if layout == "seq" else norm
