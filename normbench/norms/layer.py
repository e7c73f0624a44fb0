"""LayerNorm (Ba, Kiros & Hinton 2016): statistics over all features of one sample.

    ln = norms.create("ln", 64, "image")      # mean/var over (C, H, W) of each sample

On images the statistics cover (C, H, W) of each sample, with a scale and shift per channel: the
seeds' elementwise affine of C*H*W values would tie the layer to one image size (with the seeds'
gamma = 1, beta = 0 the two agree). That is exactly GroupNorm with one group, the native kernel used.
"""

from __future__ import annotations

from torch import nn

from normbench.norms.common import TokenWise
from normbench.norms.registry import NormSpec, register


@register(NormSpec(
    name="ln", full_name="LayerNorm",
    stats_over="all features of one sample (C,H,W for images, C per token)",
    batch_dependent=False, params="scale, shift per channel",
    paper="Ba, Kiros & Hinton 2016, arXiv 1607.06450",
))
def build_ln(num_features: int, layout: str, *, eps: float = 1e-5, affine: bool = True) -> nn.Module:
    if layout == "image":
        return nn.GroupNorm(1, num_features, eps=eps, affine=affine)
    norm = nn.LayerNorm(num_features, eps=eps, elementwise_affine=affine)
    return TokenWise(norm) if layout == "seq" else norm
