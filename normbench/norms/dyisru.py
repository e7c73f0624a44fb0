"""Dynamic Inverse Square Root Unit (Stollenwerk, "On the Mathematical Relationship Between Layer
Normalization and Dynamic Activation Functions", EACL 2026 short papers, pp. 674-681; arXiv 2503.21708):
the exact element-wise counterpart of RMSNorm, of which DyT is an approximation.

    DyISRU(x)_i = gamma_i * sqrt(C) * x_i / sqrt(beta + x_i^2)

Why: RMSNorm's x_i / sqrt(mean_j x_j^2) is sqrt(C) x_i / sqrt(x_i^2 + sum_{j != i} x_j^2). The paper replaces
the one term that couples the channels, sum_{j != i} x_j^2, by one learned scalar beta per layer (its
"decoupling in function space"), which leaves an inverse square root unit (ISRU, x / sqrt(1 + a x^2))
scaled to RMSNorm's bounds +-sqrt(C); DyT instead arises from the same decoupling in derivative space plus an
approximation. Each value is transformed on its own, so nothing depends on the batch, the other features or
padding (the mask is unused).

What this follows (found with the search tool; the paper's PDF itself was not in the store): the equation
y_i = sqrt(C) x_i / sqrt(beta + x_i^2) with beta learnable and the output bounds +-sqrt(C), from summaries of
arXiv 2503.21708v3 (the EACL 2026 version). The paper trains no model, and the sources found give no initial
value for beta and no affine part. Assumed here: gamma, RMSNorm's per-channel gain, initialized to ones
(RMSNorm's affine, no shift; `norm.affine=false` drops it), and beta initialized to C - 1 (1 for a single
channel), the expected value of the term it replaces, sum_{j != i} x_j^2, for unit-variance features (the
paper's outlier simulation fit beta = 301.1 to its own data, not a general default). With that start DyISRU is
close to the identity on unit-scale inputs, as RMSNorm is. beta is learned as it is, with no clamp or
reparameterization (none is described in the sources found): an optimizer that drove it below -min(x^2) would
give NaN. C is the layer's channel count on every layout: on images (N, C, H, W) the counterpart of an RMSNorm
over each position's C channels (the catalog's `rms` averages over C, H, W there), gamma per channel.

Not a `Squashing` (dyt.py): its output is bounded by sqrt(C), not 1, so normbench/regimes/saturation.py's
threshold (|f| > tanh(2)) would not mean the same, and it measures DyT and Derf only.

    isru = norms.create("dyisru", 64, "seq")      # (N, T, C): beta starts at 63, gamma over C
"""

from __future__ import annotations

import math

import torch
from torch import nn

from normbench.norms.registry import NormSpec, register


class DynamicISRU(nn.Module):
    """gamma * sqrt(C) * x / sqrt(beta + x^2): beta one learned scalar, gamma per channel (the last dim on
    `seq`, dim 1 otherwise)."""

    def __init__(self, num_features: int, layout: str, *, affine: bool):
        super().__init__()
        self.channel_dim = -1 if layout == "seq" else 1
        self.bound = math.sqrt(num_features)  # sqrt(C): RMSNorm's largest output
        self.beta = nn.Parameter(torch.tensor(float(max(num_features - 1, 1))))
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None

    def isru(self, x: torch.Tensor) -> torch.Tensor:
        """x / sqrt(beta + x^2), in (-1, 1)."""
        return x * torch.rsqrt(self.beta + x * x)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.isru(x)
        if self.weight is None:
            return y * self.bound
        shape = [1] * x.dim()
        shape[self.channel_dim] = -1
        return y * (self.weight * self.bound).view(shape)

    def extra_repr(self) -> str:
        return f"{round(self.bound ** 2)}, beta={self.beta.item():.4g}, affine={self.weight is not None}"


@register(NormSpec(
    name="dyisru", full_name="Dynamic Inverse Square Root Unit (DyISRU)",
    stats_over="none: sqrt(C) x / sqrt(beta + x^2) per value, beta one learned scalar",
    batch_dependent=False, params="beta (one scalar, starts at C - 1), scale per channel",
    paper="Stollenwerk 2025, arXiv 2503.21708 (EACL 2026)",
))
def build_dyisru(num_features: int, layout: str, *, affine: bool = True) -> nn.Module:
    return DynamicISRU(num_features, layout, affine=affine)
