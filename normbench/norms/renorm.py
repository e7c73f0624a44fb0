"""Batch Renormalization (Ioffe 2017): BN whose training output is corrected toward the running statistics,
so training and inference compute the same function of each example.

    brn = norms.create("brn", 64, "image", r_max=3.0, d_max=5.0, renorm_warmup=500, renorm_ramp=2500)

Training: x_hat = (x - mu_B) / sigma_B * r + d with r = clip(sigma_B / sigma, 1/r_max, r_max) and
d = clip((mu_B - mu) / sigma, -d_max, d_max), both without gradient; inference uses (mu, sigma) as BN does.
The bounds start at r_max = 1, d_max = 0 (plain BN) for `renorm_warmup` steps and relax linearly to their
final values over `renorm_ramp` steps (the paper: BN for 5k steps, r_max 3 at 40k, d_max 5 at 25k, on a
much longer run). With r_max = 1, d_max = 0 it is BN exactly (tests/test_norms_properties.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from normbench.errors import UserError
from normbench.norms.common import batch_seq, check_batch_values, masked_moments, mean_var, update_running
from normbench.norms.registry import NormSpec, register


class BatchRenorm(_BatchNorm):
    """Batch Renorm on torch's BN kernel: r and d fold into the kernel's scale and shift, so the only
    extra work is one no-grad pass for the batch statistics."""

    def __init__(self, num_features: int, layout: str, *, eps: float, momentum: float, affine: bool,
                 masked: bool, r_max: float, d_max: float, warmup: int, ramp: int):
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine)
        self.layout, self.masked = layout, masked
        self.r_max, self.d_max, self.warmup, self.ramp = r_max, d_max, warmup, ramp
        self._host_step: int | None = None

    def limits(self, step: int) -> tuple[float, float]:
        """(r_max, d_max) after `step` training steps: 1 and 0 during warmup, then linear to the final values."""
        t = min(max((step - self.warmup) / self.ramp, 0.0), 1.0) if self.ramp else float(step >= self.warmup)
        return 1 + (self.r_max - 1) * t, self.d_max * t

    def _step(self) -> int:
        """Training steps so far, counted on the host so the schedule is free of device ops and syncs; read
        from the buffer once (at the first step, or after a checkpoint is loaded)."""
        if self._host_step is None:
            self._host_step = int(self.num_batches_tracked)
        return self._host_step

    def _count_step(self) -> None:
        self._host_step = self._step() + 1
        self.num_batches_tracked.add_(1)

    def _load_from_state_dict(self, *args, **kwargs):
        self._host_step = None
        super()._load_from_state_dict(*args, **kwargs)

    def _correction(self, mean: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r_max, d_max = self.limits(self._step())
        sigma = torch.sqrt(self.running_var + self.eps)
        r = torch.sqrt(var + self.eps).div_(sigma).clamp_(1 / r_max, r_max)
        d = (mean - self.running_mean).div_(sigma).clamp_(-d_max, d_max)
        return r.detach(), d.detach()

    def _scale_shift(self, r: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """gamma (x_hat r + d) + beta = x_hat (gamma r) + (gamma d + beta)."""
        if not self.affine:
            return r, d
        return self.weight * r, torch.addcmul(self.bias, self.weight, d)

    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        check_batch_values(x, "Batch Renorm")
        with torch.no_grad():
            if x.dim() == 4:  # per (sample, channel) first: contiguous reductions, combined exactly below
                m_nc, v_nc = mean_var(x, (2, 3), keepdim=False)
                mean = m_nc.mean(0)
                var = v_nc.mean(0) + ((m_nc - mean) ** 2).mean(0)
            else:
                mean, var = mean_var(x, 0, keepdim=False)
            r, d = self._correction(mean, var)
        self._count_step()
        weight, bias = self._scale_shift(r, d)
        # The kernel normalizes by the batch statistics and updates the running ones in place.
        return F.batch_norm(x, self.running_mean, self.running_var, weight, bias, True, self.momentum, self.eps)

    def _weighted(self, xf: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return self._flat(xf) * w
        mean, var, n = masked_moments(xf, w)
        r, d = self._correction(mean.detach(), var.detach())
        self._count_step()
        update_running(self.running_mean, self.running_var, mean, var, n, self.momentum)
        weight, bias = self._scale_shift(r, d)
        return torch.addcmul(bias, (xf - mean) * torch.rsqrt(var + self.eps), weight) * w

    def _check_input_dim(self, x: torch.Tensor) -> None:
        pass

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.layout == "seq":
            return batch_seq(x, mask, self.masked, self._flat, self._weighted, self.training)
        return self._flat(x)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, r_max={self.r_max}, d_max={self.d_max}, warmup={self.warmup}, "
                f"ramp={self.ramp}, masked={self.masked}")


@register(NormSpec(
    name="brn", full_name="Batch Renormalization",
    stats_over="batch (like BN), corrected toward the running stats (r, d)",
    batch_dependent=True, params="scale, shift per channel",
    paper="Ioffe 2017, arXiv 1702.03275",
))
def build_brn(num_features: int, layout: str, *, eps: float = 1e-5, momentum: float = 0.01,
              affine: bool = True, masked: bool = True, r_max: float = 3.0, d_max: float = 5.0,
              renorm_warmup: int = 500, renorm_ramp: int = 2500) -> nn.Module:
    if r_max < 1 or d_max < 0 or renorm_warmup < 0 or renorm_ramp < 0:
        raise UserError(f"Batch Renorm needs r_max >= 1, d_max >= 0 and non-negative steps (got r_max={r_max}, "
                        f"d_max={d_max}, renorm_warmup={renorm_warmup}, renorm_ramp={renorm_ramp})",
                        "r_max=1, d_max=0 is plain BN; the paper relaxes them to 3 and 5")
    return BatchRenorm(num_features, layout, eps=eps, momentum=momentum, affine=affine, masked=masked,
                       r_max=r_max, d_max=d_max, warmup=renorm_warmup, ramp=renorm_ramp)
