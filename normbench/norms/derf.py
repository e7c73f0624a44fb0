"""Dynamic erf (Chen, Lu, Zhu, Sun & Liu 2025, "Stronger Normalization-Free Transformers", arXiv 2512.10938):
DyT's statistics-free replacement of a norm, with the Gaussian error function and a learned shift.

    Derf(x) = gamma * erf(alpha * x + s) + beta

What this follows (found with the search tool; the paper's PDF itself was not in the store): its abstract and
its authors' README define Derf(x) = erf(alpha x + s) with alpha and s learnable scalars, and its authors'
code (github.com/zlab-princeton/Derf: ViT/dynamic_erf.py, "language model/model_derf.patch") adds LN's
per-channel affine, gamma * erf(alpha x + s) + beta, with alpha and s one scalar each per layer initialized
to their module's defaults alpha_init_value = 0.5 and shift_init_value = 0.0 (used for ViT), gamma ones and
beta zeros; on images gamma and beta go per channel, as their channels-first form. erf is the plain error
function (torch.erf; the paper's "rescaled Gaussian CDF": erf(x) = 2 Phi(x sqrt 2) - 1). Both inits are
declared options (`norm.alpha_init`, `norm.shift_init`): the authors tune alpha per model (their GPT-2 patch
uses 1.0 with a learned embedding scale, not reproduced here). Each value is transformed on its own, so
nothing depends on the batch, the other features, or padding.

    derf = norms.create("derf", 64, "seq")      # (N, T, C): gamma, beta over C
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms.dyt import Squashing
from normbench.norms.registry import NormSpec, register


class DynamicErf(Squashing):
    def __init__(self, num_features: int, layout: str, *, alpha_init: float, shift_init: float, affine: bool):
        super().__init__(num_features, layout, alpha_init=alpha_init, affine=affine)
        self.shift = nn.Parameter(torch.tensor(float(shift_init)))

    def squash(self, x: torch.Tensor) -> torch.Tensor:
        return torch.erf(self.alpha * x + self.shift)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, shift={self.shift.item():.3g}"


@register(NormSpec(
    name="derf", full_name="Dynamic erf (Derf)",
    stats_over="none: erf(alpha x + s) per value, alpha and s one learned scalar each",
    batch_dependent=False, params="alpha and s (one scalar each), scale and shift per channel",
    paper="Chen et al. 2025, arXiv 2512.10938",
))
def build_derf(num_features: int, layout: str, *, alpha_init: float = 0.5, shift_init: float = 0.0,
               affine: bool = True) -> nn.Module:
    return DynamicErf(num_features, layout, alpha_init=alpha_init, shift_init=shift_init, affine=affine)
