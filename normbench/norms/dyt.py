"""Dynamic Tanh (Zhu, Chen, He, LeCun & Liu 2025, arXiv 2503.10622): a norm with no statistics at all.

    DyT(x) = gamma * tanh(alpha * x) + beta

alpha is one learnable scalar per layer (the paper's initial value alpha_0 = 0.5, its default for models
other than LLMs); gamma and beta are per channel, initialized to ones and zeros, as LN's affine. Each value
is transformed on its own, so nothing depends on the batch, the other features, or padding.

    dyt = norms.create("dyt", 64, "seq")      # (N, T, C): gamma, beta over C
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms.registry import NormSpec, register


class Squashing(nn.Module):
    """A statistics-free norm: gamma * f(x) + beta, f a bounded function of each value alone (DyT's tanh,
    Derf's erf: `squash`). Each value is transformed on its own, so a padded token changes nothing else
    (the mask is unused). gamma and beta go over the channels (the last dim on `seq`, dim 1 otherwise)."""

    def __init__(self, num_features: int, layout: str, *, alpha_init: float, affine: bool):
        super().__init__()
        self.channel_dim = -1 if layout == "seq" else 1
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features)) if affine else None

    def squash(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.squash(x)
        if self.weight is None:
            return y
        shape = [1] * x.dim()
        shape[self.channel_dim] = -1
        return torch.addcmul(self.bias.view(shape), y, self.weight.view(shape))

    def extra_repr(self) -> str:
        return f"{len(self.weight) if self.weight is not None else ''}, alpha={self.alpha.item():.3g}"


class DynamicTanh(Squashing):
    def squash(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.alpha * x)


@register(NormSpec(
    name="dyt", full_name="Dynamic Tanh (DyT)",
    stats_over="none: tanh(alpha x) per value, alpha one learned scalar",
    batch_dependent=False, params="alpha (one scalar), scale and shift per channel",
    paper="Zhu et al. 2025, arXiv 2503.10622",
))
def build_dyt(num_features: int, layout: str, *, alpha_init: float = 0.5, affine: bool = True) -> nn.Module:
    return DynamicTanh(num_features, layout, alpha_init=alpha_init, affine=affine)
