"""EvoNorm-S0 (Liu et al. 2020): the batch-independent norm-activation found by architecture search.

    evo = norms.create("evonorm", 64, "image", groups=8)

y = x * sigmoid(v x) / group_std(x) * gamma + beta, with group_std the standard deviation over each
group of C/G channels (and H, W) of one sample, sqrt(var + eps), as in the paper's Algorithm. Like FRN it
includes its activation. The paper uses 32 groups; 8 keeps >= 4 channels per group in our models.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms.common import BROADCAST
from normbench.norms.fused import evonorm_s0
from normbench.norms.group import check_groups
from normbench.norms.registry import NormSpec, register


class EvoNormS0(nn.Module):
    def __init__(self, num_features: int, layout: str, *, groups: int, eps: float):
        super().__init__()
        self.layout, self.groups, self.eps = layout, groups, eps
        self.weight = nn.Parameter(torch.ones(num_features))  # gamma
        self.bias = nn.Parameter(torch.zeros(num_features))  # beta
        self.v = nn.Parameter(torch.ones(num_features))  # the swish-like gate's slope

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        shape, red = BROADCAST[self.layout]
        return evonorm_s0(x, self.v.view(shape), self.weight.view(shape), self.bias.view(shape), self.groups,
                          self.eps, self.layout, red)

    def extra_repr(self) -> str:
        return f"layout={self.layout}, groups={self.groups}, eps={self.eps}"


@register(NormSpec(
    name="evonorm", full_name="EvoNorm-S0",
    stats_over="groups of channels (+ H, W) per sample (std only)",
    batch_dependent=False, params="scale, shift, gate slope v per channel",
    paper="Liu et al. 2020, arXiv 2004.02967",
    own_activation=True,
))
# eps 1e-5: the paper's.
def build_evonorm(num_features: int, layout: str, *, groups: int = 8, eps: float = 1e-5) -> nn.Module:
    check_groups(groups, num_features, layout, name="EvoNorm-S0")
    return EvoNormS0(num_features, layout, groups=groups, eps=eps)
