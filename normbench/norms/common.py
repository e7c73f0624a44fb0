"""Small pieces shared by the norm families: the token-wise adapter for `seq` layout, masks."""

from __future__ import annotations

import torch
from torch import nn


class TokenWise(nn.Module):
    """Apply a per-token norm to (N, T, C). Its statistics never mix tokens, so the mask is not needed."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.norm(x)


def channels_last_2d(x: torch.Tensor) -> torch.Tensor:
    """(N, T, C) -> (N*T, C): every token a row, for kernels that want (N, C)."""
    return x.reshape(-1, x.shape[-1])
