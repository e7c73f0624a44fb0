"""Switchable Normalization (Luo et al. 2018): a learned mix of IN, LN and BN statistics.

    sn = norms.create("sn", 64, "image")
    mean_w, var_w = sn.weights()              # softmax over (IN, LN, BN): each sums to 1

mu = sum_k w_k mu_k and sigma^2 = sum_k w'_k sigma^2_k, with separate softmax weights for the means and the
variances (eq. 3-4); LN and BN statistics are computed from IN's, as the paper's implementation does.
BN's branch keeps running averages that eval uses. On flat and seq features IN has one value per channel,
so the mix is over LN and BN only (padding-aware on seq, like bn). With `ghost_batch=K` the BN branch's
statistics are each group of K samples' (batch_stats.py); IN and LN are per sample already.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms import batch_stats
from normbench.norms.common import batch_seq, check_batch_values, check_spatial, mean_var, scale_shift
from normbench.norms.registry import NormSpec, register


class SwitchableNorm(batch_stats.BatchStatistics, nn.Module):
    """Its BN branch follows the batch-statistics protocol (PreciseBN re-estimates that branch's statistics)."""

    def __init__(self, num_features: int, layout: str, *, eps: float, momentum: float, affine: bool,
                 masked: bool, ghost_batch: int | None = None):
        super().__init__()
        self.layout, self.eps, self.momentum, self.masked = layout, eps, momentum, masked
        self.ghost_batch = ghost_batch
        self.branches = ("in", "ln", "bn") if layout == "image" else ("ln", "bn")
        # Equal importance at the start: softmax of equal logits (the paper initializes them to 1).
        self.mean_weight = nn.Parameter(torch.ones(len(self.branches)))
        self.var_weight = nn.Parameter(torch.ones(len(self.branches)))
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features)) if affine else None
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The importance of each branch (`self.branches`) for the mean and for the variance."""
        return self.mean_weight.softmax(0), self.var_weight.softmax(0)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        groups = self.groups(x, "Switchable Norm")
        if self.layout == "image":
            return self._image(x, groups)
        if self.layout == "seq":
            return batch_seq(x, mask, self.masked, lambda rows: self._rows(rows, groups),
                             lambda rows, w: self._weighted_rows(rows, w, groups), self.training, groups > 1)
        return self._rows(x, groups)

    def _track(self, mean: torch.Tensor, var: torch.Tensor, n, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Fold G groups' BN statistics (G, C) into the running ones that eval uses; return them one row per
        sample or token (rows, C), or (1, C) without ghost batches."""
        groups = mean.shape[0]
        counts = torch.as_tensor(n, dtype=mean.dtype, device=mean.device).expand(groups)
        batch_stats.absorb(self, mean, batch_stats.unbiased(var, counts), counts)
        return batch_stats.spread(mean, groups, rows), batch_stats.spread(var, groups, rows)

    def _running(self, shape) -> tuple[torch.Tensor, torch.Tensor]:
        return self.running_mean.view(shape), self.running_var.view(shape)

    def _normalize(self, x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, shape) -> torch.Tensor:
        """(x - mean) / sqrt(var + eps) * gamma + beta as one fused x * a + b."""
        a = torch.rsqrt(var + self.eps)
        if self.weight is not None:
            a = a * self.weight.view(shape)
        b = -mean * a
        if self.bias is not None:
            b = b + self.bias.view(shape)
        return scale_shift(x, a, b)

    def _image(self, x: torch.Tensor, groups: int) -> torch.Tensor:
        check_spatial(x, "Switchable Norm")
        n, c = x.shape[:2]
        mean_in, var_in = mean_var(x, (2, 3))  # (N, C, 1, 1)
        # Pooled from IN's: the mean of the variances plus the variance of the means (no E[x^2] - E[x]^2
        # cancellation), since every (sample, channel) has the same H x W count.
        mean_ln = mean_in.mean(1, keepdim=True)
        var_ln = var_in.mean(1, keepdim=True) + (mean_in - mean_ln).square().mean(1, keepdim=True)
        if self.training:
            check_batch_values(x, "Switchable Norm")
            m_g, v_g = mean_in.view(groups, -1, c), var_in.view(groups, -1, c)
            mean_bn = m_g.mean(1)
            var_bn = v_g.mean(1) + (m_g - mean_bn[:, None]).square().mean(1)
            mean_bn, var_bn = self._track(mean_bn, var_bn, x.numel() // (c * groups), n)
            mean_bn, var_bn = mean_bn.view(-1, c, 1, 1), var_bn.view(-1, c, 1, 1)
        else:
            mean_bn, var_bn = self._running((1, -1, 1, 1))
        mw, vw = self.weights()
        mean = mw[0] * mean_in + mw[1] * mean_ln + mw[2] * mean_bn
        var = vw[0] * var_in + vw[1] * var_ln + vw[2] * var_bn
        return self._normalize(x, mean, var, (1, -1, 1, 1))

    def _mix_rows(self, x, mean_bn, var_bn) -> torch.Tensor:
        mean_ln, var_ln = mean_var(x, 1)  # (M, 1)
        mw, vw = self.weights()
        mean = mw[0] * mean_ln + mw[1] * mean_bn
        var = vw[0] * var_ln + vw[1] * var_bn
        return self._normalize(x, mean, var, (1, -1))

    def _rows(self, x: torch.Tensor, groups: int = 1) -> torch.Tensor:
        """(M, C) rows: LN per row, BN over the rows (over each group's rows with ghost batches)."""
        if self.training:
            check_batch_values(x, "Switchable Norm")
            batch_stats.check_group_values(x.shape[0] // groups, self.ghost_batch, "Switchable Norm")
            mean_bn, var_bn = mean_var(x.reshape(groups, -1, x.shape[1]), 1, keepdim=False)
            mean_bn, var_bn = self._track(mean_bn, var_bn, x.shape[0] // groups, x.shape[0])
        else:
            mean_bn, var_bn = self._running((1, -1))
        return self._mix_rows(x, mean_bn, var_bn)

    def _weighted_rows(self, xf: torch.Tensor, w: torch.Tensor, groups: int = 1) -> torch.Tensor:
        if self.training:
            mean, var, n = batch_stats.grouped_masked_moments(xf, w, groups)
            mean_bn, var_bn = self._track(mean, var, n, xf.shape[0])
        else:
            mean_bn, var_bn = self._running((1, -1))
        return self._mix_rows(xf, mean_bn, var_bn) * w

    def extra_repr(self) -> str:
        return (f"branches={self.branches}, eps={self.eps}, momentum={self.momentum}, masked={self.masked}, "
                f"ghost_batch={self.ghost_batch}")


@register(NormSpec(
    name="sn", full_name="Switchable Normalization",
    stats_over="learned softmax mix of IN, LN and BN statistics (LN, BN on flat/seq)",
    batch_dependent=True, params="scale, shift per channel; mix weights for means and variances",
    paper="Luo et al. 2018, arXiv 1806.10779",
))
# momentum 0.1 matches bn; the paper's code uses 0.003 in this convention.
def build_sn(num_features: int, layout: str, *, eps: float = 1e-5, momentum: float = 0.1,
             affine: bool = True, masked: bool = True, ghost_batch: int | None = None) -> nn.Module:
    batch_stats.check_option(ghost_batch, "Switchable Norm")
    return SwitchableNorm(num_features, layout, eps=eps, momentum=momentum, affine=affine, masked=masked,
                          ghost_batch=ghost_batch)
