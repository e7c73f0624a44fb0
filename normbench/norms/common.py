"""Pieces shared by the norm families: layouts' reduction axes, the token-wise adapter, masked statistics,
and the checks that turn an impossible input into a one-line UserError.

    dims = batch_dims("image")                      # (0, 2, 3): BN's axes for (N, C, H, W)
    y = batch_seq(x, mask, masked, flat, weighted, training)   # a batch-statistics norm on (N, T, C)
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from normbench.errors import UserError

Tensor = torch.Tensor


class TokenWise(nn.Module):
    """Apply a per-token norm to (N, T, C). Its statistics never mix tokens, so the mask is not needed."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.norm(x)


# layout -> (the view that broadcasts a per-channel vector, the axes a per-channel gradient sums over)
BROADCAST = {"flat": ((1, -1), (0,)), "image": ((1, -1, 1, 1), (0, 2, 3)), "seq": ((1, 1, -1), (0, 1))}


def channel_shape(x: Tensor, layout: str) -> tuple[int, ...]:
    """The shape that broadcasts a per-channel vector against `x`: (1, C), (1, C, 1, 1) or (1, 1, C)."""
    c = x.shape[-1] if layout == "seq" else x.shape[1]
    return {"flat": (1, c), "image": (1, c, 1, 1), "seq": (1, 1, c)}[layout]


def batch_dims(layout: str) -> tuple[int, ...]:
    """The axes BatchNorm averages over, per channel."""
    return {"flat": (0,), "image": (0, 2, 3), "seq": (0, 1)}[layout]


def check_batch_values(x: Tensor, name: str, channel_dim: int = 1) -> None:
    """Batch statistics need two values per channel; with one, the variance is 0 and the output constant.

    A shape test, so it costs no device sync; torch's own check raises a bare ValueError instead.
    """
    if x.numel() == x.shape[channel_dim]:
        raise UserError(
            f"{name} in training computes statistics over the batch, and this batch {tuple(x.shape)} has one "
            "value per channel",
            "use batch_size >= 2, or a batch-independent norm (ln, gn, rms)",
        )


def check_spatial(x: Tensor, name: str) -> None:
    """Per-sample per-channel statistics over H, W need two or more positions (torch raises ValueError)."""
    if x.shape[2] * x.shape[3] == 1:
        raise UserError(f"{name} averages over H x W per channel, and this input {tuple(x.shape)} is 1 x 1",
                        "use ln or gn here, or keep the feature maps larger than 1 x 1")


def mean_var(x: Tensor, dims, keepdim: bool = True) -> tuple[Tensor, Tensor]:
    """Mean and biased variance over `dims`, in two passes (stable). torch.var_mean's CPU kernel measured
    10-50x slower than this on our shapes (torch 2.x, one thread), so the norms use this instead."""
    mean = x.mean(dims, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(dims, keepdim=keepdim)
    return (mean if keepdim else mean.squeeze(dims)), var


def scale_shift(x: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """x * a + b for per-(sample,) channel a, b; on 4-D inputs an in-place add after the product is ~3x
    faster than torch.addcmul's broadcasting kernel on CPU."""
    return (x * a).add_(b) if x.dim() == 4 else torch.addcmul(b, x, a)


def batch_seq(x: Tensor, mask: Tensor | None, masked: bool, flat: Callable[[Tensor], Tensor],
              weighted: Callable[[Tensor, Tensor], Tensor], training: bool, ghost: bool = False) -> Tensor:
    """Run a batch-statistics norm on (N, T, C) tokens: `flat` normalizes (M, C) rows over the batch.

    With a mask (and `masked`), statistics cover real tokens only and padding outputs are 0. On the CPU the
    real tokens are gathered and normalized by `flat` (native kernels; gathering costs no device sync there);
    on an accelerator `weighted(rows, w)` computes the same with a 0/1 weight per row, so the data-dependent
    count never has to reach the host. A training batch with fewer than two real tokens (a late step of
    recurrent BN) has no variance: `weighted` handles it (zero variance, running statistics left alone)
    rather than failing mid-run on what the data happened to be. With ghost batches (`ghost`, in training)
    the rows stay in place, grouped by sample, so masked statistics take the weighted path on every device.
    """
    c = x.shape[-1]
    if mask is None or not masked:
        return flat(x.reshape(-1, c)).view(x.shape)
    if x.device.type == "cpu" and not (ghost and training):
        idx = mask.reshape(-1).nonzero().squeeze(1)  # index_select/index_copy: ~1.5x faster than x[mask]
        if idx.numel() >= 2 or not training:
            rows = flat(x.reshape(-1, c).index_select(0, idx))
            return x.new_zeros(x.shape[0] * x.shape[1], c).index_copy(0, idx, rows).view(x.shape)
    w = mask.reshape(-1, 1).to(x.dtype)
    return weighted(x.reshape(-1, c), w).view(x.shape)
