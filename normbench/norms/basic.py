"""`none`: the identity, the baseline every norm is compared against."""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms.registry import NormSpec, register


class Identity(nn.Identity):
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:  # noqa: ARG002
        return x


@register(NormSpec(
    name="none", full_name="no normalization", stats_over="-", batch_dependent=False,
    params="-", paper="baseline",
))
def build_none(num_features: int, layout: str) -> nn.Module:
    return Identity()
