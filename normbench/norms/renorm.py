"""Batch Renormalization (Ioffe 2017, arXiv 1702.03275), Algorithm 1: BN whose training output is corrected
toward the running statistics, so training and inference compute the same function of each example.

    brn = norms.create("brn", 64, "image")     # the paper's schedule, as fractions of the run
    brn.set_total_steps(10_000)                # or norms.set_total_steps(model, n): the run's length

Algorithm 1, per channel, for a batch (or each ghost batch in turn) with mean mu_B and standard deviation
sigma_B = sqrt(biased variance + eps):

    r = stop_gradient(clip(sigma_B / sigma, 1/r_max, r_max)),  d = stop_gradient(clip((mu_B - mu) / sigma, -d_max, d_max))
    y = gamma ((x - mu_B) / sigma_B * r + d) + beta
    mu <- mu + momentum (mu_B - mu),  sigma <- sigma + momentum (sigma_B - sigma)

and at inference y = gamma (x - mu) / sigma + beta. The moving average is of sigma_B itself (the biased batch
standard deviation, eps inside), not of the variance as BatchNorm keeps it: at ghost batch K = 2 the two
differ by a factor ~0.56 (E|z1 - z2| / 2 = 1/sqrt(pi) for unit normals). sigma is stored as
`running_var` = sigma^2 - eps, so torch's inference kernel, (x - mu) / sqrt(running_var + eps), computes
(x - mu) / sigma exactly, and PreciseBN (which writes a population variance there) needs nothing new. So the
`r_max=1, d_max=0` ablation trains exactly as BN does (r = 1, d = 0) but keeps the paper's sigma for
inference: it isolates the correction from the choice of moving average, and is not BN at test time.

The schedule is in fractions of the run's training steps, so it has the paper's shape at any run length.
The paper (section 4.1) trains 130k steps: plain BN (r_max = 1, d_max = 0) for the first 5k, then relaxes
the bounds linearly to reach r_max = 3 at 40k and d_max = 5 at 25k. Here: plain BN for the first
`renorm_warmup_frac` = 0.04 of the run (5k / 130k = 0.038), then r_max relaxes over the next
`renorm_r_ramp_frac` = 0.27 (reached at 0.31 ~ 40k / 130k) and d_max over the next `renorm_d_ramp_frac` =
0.15 (reached at 0.19 ~ 25k / 130k). A ramp of 0 jumps to the final bound when the warmup ends. The module
learns the run's length from `set_total_steps(n)` (the engine calls it). Without it (a layer used outside a
run: a benchmark, a forward pass in a test) there is no run to take fractions of, and the bounds are the
final r_max, d_max from the first step, with a warning, unless the schedule is flat anyway.

Momentum 0.1, BatchNorm's (the paper does not state one; with ghost batches it is a window of ~10 groups,
~20 samples at K = 2). The step counter `step` is a tensor buffer and the bounds are computed from it on the
device, so the schedule costs no host sync and does not recompile under torch.compile. `num_batches_tracked`
counts running-statistics updates (ghost batches), as bn's does; `step` counts training forward passes.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from normbench.errors import UserError
from normbench.norms import batch_stats
from normbench.norms.common import batch_seq, check_batch_values, mean_var
from normbench.norms.registry import NormSpec, register


class BatchRenorm(batch_stats.BatchStatistics, _BatchNorm):
    """Batch Renorm on torch's BN kernel: r and d fold into the kernel's scale and shift (per ghost batch, one
    kernel "channel" per (group, channel)), so the only extra work is one no-grad pass for the statistics."""

    running_affine = True  # eval mode is BN's: an affine map of the running statistics alone

    # Its training-mode output reads the running statistics, which each batch moves: a pass over batches in
    # turn is not one over their groups at once (norm_modes.split_statistics leaves it alone)
    splits_statistics = False

    def __init__(self, num_features: int, layout: str, *, eps: float, momentum: float, affine: bool,
                 masked: bool, ghost_batch: int | None, r_max: float, d_max: float, warmup: float,
                 r_ramp: float, d_ramp: float):
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine)
        self.layout, self.masked, self.ghost_batch = layout, masked, ghost_batch
        self.r_max, self.d_max, self.warmup, self.r_ramp, self.d_ramp = r_max, d_max, warmup, r_ramp, d_ramp
        self.total_steps: int | None = None
        self._warned = False
        self.register_buffer("step", torch.tensor(0, dtype=torch.long))

    def set_total_steps(self, total_steps: int) -> None:
        """The run's number of training steps, which the schedule's fractions refer to."""
        if total_steps < 1:
            raise UserError(f"Batch Renorm's schedule needs a run of >= 1 steps (got {total_steps})")
        self.total_steps = int(total_steps)

    @property
    def flat_schedule(self) -> bool:
        """True when the bounds never change, so the run's length is not needed."""
        return (self.r_max == 1 and self.d_max == 0) or (self.warmup == self.r_ramp == self.d_ramp == 0)

    def limits(self, step: torch.Tensor | int) -> tuple[torch.Tensor, torch.Tensor]:
        """(r_max, d_max) after `step` training steps, as tensors: 1 and 0 during the warmup, then linear."""
        step = torch.as_tensor(step, device=self.step.device).float()  # float32: enough for a fraction
        if self.total_steps is None:
            if not self.flat_schedule and not self._warned:
                warnings.warn("Batch Renorm was not told the run's length (norms.set_total_steps(model, n)), so "
                              "its schedule cannot place its fractions: it uses the final r_max, d_max from the "
                              "first step", stacklevel=2)
                self._warned = True
            return step.new_tensor(self.r_max), step.new_tensor(self.d_max)
        return (self._bound(step, self.r_ramp, 1.0, self.r_max), self._bound(step, self.d_ramp, 0.0, self.d_max))

    def _bound(self, step: torch.Tensor, ramp: float, start: float, end: float) -> torch.Tensor:
        """start until the warmup ends, then linear to end over `ramp` (fractions of total_steps)."""
        begin = self.warmup * self.total_steps
        if ramp == 0:
            return torch.where(step >= begin, step.new_tensor(end), step.new_tensor(start))
        slope = (end - start) / (ramp * self.total_steps)
        return (step * slope + (start - slope * begin)).clamp(min(start, end), max(start, end))

    def _sigma(self) -> torch.Tensor:
        """The running standard deviation sigma (C,), stored as running_var = sigma^2 - eps."""
        return torch.sqrt(self.running_var + self.eps)

    def _correction(self, mean: torch.Tensor, var: torch.Tensor, n) -> tuple[torch.Tensor, torch.Tensor]:
        """r and d (G, C) for G groups' statistics (biased variance, counts n), each group measured against
        the running mu and sigma it sees after the groups before it updated them (Algorithm 1, in turn)."""
        r_max, d_max = (b.to(mean.dtype) for b in self.limits(self.step))
        sigma_b = torch.sqrt(var + self.eps)
        if mean.shape[0] == 1:  # one batch: the running statistics as they are (the common case, kept cheap)
            running_mean, sigma = self.running_mean, self._sigma()
        else:
            m = batch_stats.momenta(self._counts(n, mean), self.momentum)
            running_mean = batch_stats.running_before(self.running_mean, mean, m)
            sigma = batch_stats.running_before(self._sigma(), sigma_b, m)
        r = (sigma_b / sigma).clamp(r_max.reciprocal(), r_max)
        d = ((mean - running_mean) / sigma).clamp(-d_max, d_max)
        return r.detach(), d.detach()

    @staticmethod
    def _counts(n, like: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(n, dtype=like.dtype, device=like.device).expand(like.shape[0])

    def _absorb(self, mean: torch.Tensor, var: torch.Tensor, n) -> None:
        """Fold G groups' statistics (biased variance) in turn into mu and sigma (Algorithm 1's moving averages
        of mu_B and sigma_B); PreciseBN's sink, when set, takes them as BN's would (its population variance)."""
        n = self._counts(n, mean)
        if self.stats_sink is not None:
            batch_stats.absorb(self, mean, batch_stats.unbiased(var, n), n)
            return
        with torch.no_grad():
            keep, w = batch_stats.final_weights(batch_stats.momenta(n, self.momentum))
            sigma = keep * self._sigma() + w @ torch.sqrt(var.detach() + self.eps)
            self.running_mean.copy_(keep * self.running_mean + w @ mean.detach())
            self.running_var.copy_(sigma.square() - self.eps)

    def _scale_shift(self, r: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """gamma (x_hat r + d) + beta = x_hat (gamma r) + (gamma d + beta); (G, C)."""
        if self.weight is None:
            return r, d
        bias = self.weight * d if self.bias is None else torch.addcmul(self.bias, self.weight, d)
        return self.weight * r, bias

    def _dense(self, x: torch.Tensor, groups: int) -> torch.Tensor:
        if not self.training:  # (x - mu) / sqrt(running_var + eps) = (x - mu) / sigma
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        check_batch_values(x, "Batch Renorm")
        c = x.shape[1]
        values = x.numel() // (c * groups)
        batch_stats.check_group_values(values, self.ghost_batch, "Batch Renorm")
        with torch.no_grad():
            if x.dim() == 4:  # per (sample, channel) first: contiguous reductions, combined exactly below
                m_nc, v_nc = mean_var(x, (2, 3), keepdim=False)
                m_g, v_g = m_nc.view(groups, -1, c), v_nc.view(groups, -1, c)
                mean = m_g.mean(1)
                var = v_g.mean(1) + ((m_g - mean[:, None]) ** 2).mean(1)
            else:
                mean, var = mean_var(x.reshape(groups, -1, c), 1, keepdim=False)
            r, d = self._correction(mean, var, values)
        self.step.add_(1)
        self.num_batches_tracked.add_(groups)
        weight, bias = self._scale_shift(r, d)
        # The kernel normalizes each group by its own statistics; r and d ride on its scale and shift.
        y = F.batch_norm(batch_stats.to_groups(x, groups), None, None, weight.flatten(), bias.flatten(), True, 0.0,
                         self.eps)
        self._absorb(mean, var, values)
        return batch_stats.from_groups(y, groups)

    def _weighted(self, xf: torch.Tensor, w: torch.Tensor, groups: int = 1) -> torch.Tensor:
        if not self.training:
            return self._dense(xf, 1) * w
        mean, var, n = batch_stats.grouped_masked_moments(xf, w, groups)
        r, d = self._correction(mean.detach(), var.detach(), n)
        self.step.add_(1)
        self.num_batches_tracked.add_(groups)
        self._absorb(mean, var, n)
        weight, bias = self._scale_shift(r, d)
        rows = xf.shape[0]
        y = (xf - batch_stats.spread(mean, groups, rows)) * torch.rsqrt(batch_stats.spread(var, groups, rows) + self.eps)
        return torch.addcmul(batch_stats.spread(bias, groups, rows), y, batch_stats.spread(weight, groups, rows)) * w

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        groups = self.groups(x, "Batch Renorm")
        if self.layout == "seq":
            return batch_seq(x, mask, self.masked, lambda rows: self._dense(rows, groups),
                             lambda rows, w: self._weighted(rows, w, groups), self.training, groups > 1)
        return self._dense(x, groups)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, r_max={self.r_max}, d_max={self.d_max}, warmup={self.warmup}, "
                f"r_ramp={self.r_ramp}, d_ramp={self.d_ramp}, total_steps={self.total_steps}, "
                f"masked={self.masked}, ghost_batch={self.ghost_batch}")


@register(NormSpec(
    name="brn", full_name="Batch Renormalization",
    stats_over="batch or ghost batch (like BN), corrected toward the running stats (r, d)",
    batch_dependent=True, params="scale, shift per channel", exact_gradient=False,
    paper="Ioffe 2017, arXiv 1702.03275",
))
def build_brn(num_features: int, layout: str, *, eps: float = 1e-5, momentum: float = 0.1,
              affine: bool = True, masked: bool = True, ghost_batch: int | None = None, r_max: float = 3.0,
              d_max: float = 5.0, renorm_warmup_frac: float = 0.04, renorm_r_ramp_frac: float = 0.27,
              renorm_d_ramp_frac: float = 0.15) -> nn.Module:
    fracs = (renorm_warmup_frac, renorm_r_ramp_frac, renorm_d_ramp_frac)
    if r_max < 1 or d_max < 0 or min(fracs) < 0 or renorm_warmup_frac + max(renorm_r_ramp_frac,
                                                                            renorm_d_ramp_frac) > 1:
        raise UserError(f"Batch Renorm needs r_max >= 1, d_max >= 0 and fractions of the run >= 0 whose warmup "
                        f"+ ramp is <= 1 (got r_max={r_max}, d_max={d_max}, renorm_warmup_frac="
                        f"{renorm_warmup_frac}, renorm_r_ramp_frac={renorm_r_ramp_frac}, renorm_d_ramp_frac="
                        f"{renorm_d_ramp_frac})", "r_max=1, d_max=0 is plain BN; the paper's shape is 0.04, 0.27, 0.15")
    batch_stats.check_option(ghost_batch, "Batch Renorm")
    return BatchRenorm(num_features, layout, eps=eps, momentum=momentum, affine=affine, masked=masked,
                       ghost_batch=ghost_batch, r_max=r_max, d_max=d_max, warmup=renorm_warmup_frac,
                       r_ramp=renorm_r_ramp_frac, d_ramp=renorm_d_ramp_frac)


def set_total_steps(model: nn.Module, total_steps: int) -> int:
    """Tell every layer of `model` that schedules by the run's length (Batch Renorm) how many training steps
    the run has; returns how many layers were told. Call before training, and again after a resume."""
    told = 0
    for m in model.modules():
        if isinstance(m, BatchRenorm):
            m.set_total_steps(total_steps)
            told += 1
    return told
