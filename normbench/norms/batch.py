"""BatchNorm (Ioffe & Szegedy 2015): statistics over the batch (and H, W / T) per channel.

    bn = norms.create("bn", 64, "seq")        # forward(x, mask): statistics over real tokens only
    bn = norms.create("bn", 64, "seq", masked=False)   # naive: the padding is counted too
    bn = norms.create("bn", 64, "image", ghost_batch=4)   # statistics over each group of 4 samples
    bn = norms.create("bn", 64, "image", positions=4)     # statistics over 4 random positions per image
    bn = norms.create("bn", 64, "flat", eps=0.1, eps_grad=1e-5)   # eps 0.1's output, eps 1e-5's gradient

On `seq` layout the statistics cover real tokens only when given a mask (PowerNorm's masked BN,
Shen et al. 2020); `masked=False` reproduces the naive layer whose statistics include the padding.
`ghost_batch=K` normalizes each group of K consecutive samples by its own statistics and updates the
running statistics once per group, in order (Hoffer et al. 2017; see batch_stats.py); `num_batches_tracked`
then counts groups, as K-sample BatchNorm calls would. `positions=k` (images only) takes the training
statistics over k spatial positions per image drawn at random each batch (all positions are normalized by
them), so the values per channel, batch x k, can shrink at a fixed batch: the experiment that tells the
values-per-channel explanation of BN's small-batch failure from the batch size itself. `impl="scratch"`
selects the from-scratch twin in scratch.py, checked equal to this one. `eps_grad=e` (training only) keeps
the output of BN at `eps` and backpropagates the gradient of BN at `e` instead, at the same input, batch
statistics and groups (`batch_stats.split_eps`): at K = 2 on flat features, where BN at eps is
delta / sqrt(delta^2 + eps), it tells what eps does to the forward pass from what it does to the gradient.
Running statistics and evaluation use `eps`; None (or e = eps) is the plain layer, code path and all.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from normbench.errors import UserError
from normbench.norms import batch_stats
from normbench.norms.common import batch_seq, check_batch_values
from normbench.norms.registry import NormSpec, register

# Ghost batches on the CPU: with this many values per channel in a group or more, one kernel call per group
# beat one call over all groups folded into channels (to_groups copies the input and its gradient); below
# it, the calls' overhead wins. Measured on 64x256, 64x32x28x28 and 64x28x256 inputs, K = 2-32 (one thread).
# Accelerators always take the one-call path (one launch instead of G).
LOOP_MIN_VALUES = 32


def position_seed() -> int:
    """A seed drawn from a copy of torch's global CPU generator: deterministic given the run's seed and
    what was drawn before it, and without advancing the global stream."""
    gen = torch.Generator()
    gen.set_state(torch.get_rng_state())
    return int(torch.randint(2**31 - 1, (), generator=gen))


class BatchNorm(batch_stats.BatchStatistics, _BatchNorm):
    """torch's BatchNorm kernel for every layout: (N, C), (N, C, H, W), and (N, T, C) with a padding mask."""

    running_affine = True  # eval mode is an affine map of the running statistics alone (models/cells.py reads it)

    def __init__(self, num_features: int, layout: str, *, masked: bool = True, ghost_batch: int | None = None,
                 positions: int | None = None, eps_grad: float | None = None, **kwargs):
        super().__init__(num_features, **kwargs)
        self.layout, self.masked, self.ghost_batch, self.positions = layout, masked, ghost_batch, positions
        # None where it would change nothing (unset, or eps itself): batch_stats.splits_eps then says no
        self.eps_grad = None if eps_grad is None or eps_grad == self.eps else float(eps_grad)
        if positions is not None:
            # Each batch's positions come from this seed and the batch count (a buffer): drawn the same way
            # whether the run resumes or trains in a pack, and from nothing else's random stream. The seed is
            # drawn from a copy of the global generator, which it leaves where it was: the weights built
            # after this layer are those of plain BN at the same seed (runs pair), and layers apart in a
            # model (weights initialized between them) draw different seeds.
            self.position_seed = position_seed()
            self.splits_statistics = False  # norm_modes.split_statistics: the draws are per batch, not per group

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        groups = self.groups(x, "BatchNorm")
        if self.layout != "seq":
            return self._dense(x, groups)
        return batch_seq(x, mask, self.masked, lambda rows: self._dense(rows, groups),
                         lambda rows, w: self._weighted(rows, w, groups), self.training, groups > 1)

    def _dense(self, x: torch.Tensor, groups: int) -> torch.Tensor:
        """(N, C, ...) with every position counted: the kernel, over G C channels for G ghost batches."""
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        check_batch_values(x, "BatchNorm")
        if self.positions is not None:
            return self._sampled(x)
        return train_dense(self, x, groups)

    def _normalized(self, normalize: Callable[[float], torch.Tensor]) -> torch.Tensor:
        """normalize(eps) from statistics already taken; with `eps_grad`, its numbers and the gradient of
        normalize(eps_grad) through the same statistics (batch_stats.split_eps)."""
        if not batch_stats.splits_eps(self):
            return normalize(self.eps)
        with torch.no_grad():
            value = normalize(self.eps)
        return batch_stats.split_eps(value, normalize(self.eps_grad))

    def _sampled(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) normalized by the mean and variance of `positions` distinct random positions of each
        image (all of them where a layer has fewer), gradients flowing through those statistics as in BN."""
        n, c = x.shape[:2]
        flat = x.flatten(2)
        k = min(self.positions, flat.shape[2])
        if n * k < 2:
            raise UserError(f"BatchNorm with positions={self.positions} at batch {n} computes its statistics over "
                            f"{n * k} value per channel, which has no variance", "use norm.positions >= 2")
        gen = torch.Generator(device=x.device).manual_seed(self.position_seed + int(self.num_batches_tracked))
        idx = torch.rand(n, flat.shape[2], generator=gen, device=x.device).argsort(1)[:, :k]
        sub = flat.gather(2, idx[:, None, :].expand(n, c, k))  # (N, C, k)
        mean, var = sub.mean((0, 2)), sub.var((0, 2), unbiased=False)
        self.num_batches_tracked.add_(1)
        batch_stats.absorb(self, mean[None], var[None] * (n * k / (n * k - 1)), n * k)
        shape = (1, c) + (1,) * (x.dim() - 2)

        def normalize(eps: float) -> torch.Tensor:
            y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + eps)
            if self.weight is not None:
                y = y * self.weight.view(shape) + self.bias.view(shape)
            return y

        return self._normalized(normalize)

    def _weighted(self, xf: torch.Tensor, w: torch.Tensor, groups: int = 1) -> torch.Tensor:
        """Statistics over the rows with w = 1 (the accelerator path: no data-dependent shapes), per group
        of rows for ghost batches."""
        if not self.training:
            return F.batch_norm(xf, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps) * w
        mean, var, n = batch_stats.grouped_masked_moments(xf, w, groups)
        self.num_batches_tracked.add_(groups)
        batch_stats.absorb(self, mean, batch_stats.unbiased(var, n), n)
        rows = xf.shape[0]

        def normalize(eps: float) -> torch.Tensor:
            y = (xf - batch_stats.spread(mean, groups, rows)) * torch.rsqrt(batch_stats.spread(var, groups, rows) + eps)
            if self.weight is not None:
                y = y * self.weight
            if self.bias is not None:
                y = y + self.bias
            return y * w

        return self._normalized(normalize)

    def extra_repr(self) -> str:
        extra = f", positions={self.positions}" if self.positions is not None else ""
        extra += f", eps_grad={self.eps_grad}" if self.eps_grad is not None else ""
        return (f"{super().extra_repr()}, layout={self.layout}, masked={self.masked}, ghost_batch={self.ghost_batch}"
                f"{extra}")


def train_dense(bn, x: torch.Tensor, groups: int) -> torch.Tensor:
    """BatchNorm in training over (N, C, ...), every position counted: each of `groups` ghost batches (or the
    whole batch) normalized by its own statistics, which go to `bn`'s running statistics in order (or to
    PreciseBN's sink). `bn` is a BatchStatistics module with BN's parameters and buffers: a member's
    `BatchNorm`, or a pack's `PackedBatchNorm` over its members' S C channels, so both run this code. With
    `eps_grad`, the numbers as without it and the gradient of BN at eps_grad (batch_stats.split_eps)."""
    if not batch_stats.splits_eps(bn):
        return _train_groups(bn, x, groups)
    with torch.no_grad():  # the numbers (and the running statistics' one update) as without eps_grad
        value = _train_groups(bn, x, groups)
    return batch_stats.split_eps(value, _batch_statistics(bn, x, groups, bn.eps_grad))


def _loops(x: torch.Tensor, groups: int) -> bool:
    """Ghost batches as one kernel call per group (the definition itself) rather than one call over all
    groups folded into channels: on the CPU, from LOOP_MIN_VALUES values per channel in a group."""
    return groups > 1 and x.device.type == "cpu" and x.numel() // (x.shape[1] * groups) >= LOOP_MIN_VALUES


def _train_groups(bn, x: torch.Tensor, groups: int) -> torch.Tensor:
    """`train_dense` at `bn.eps`: the batch's (or each group's) statistics, the running ones updated."""
    if groups == 1 and bn.stats_sink is None:  # the kernel updates the running statistics in place
        bn.num_batches_tracked.add_(1)
        return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, True, bn.momentum, bn.eps)
    values = x.numel() // (x.shape[1] * groups)
    batch_stats.check_group_values(values, bn.ghost_batch, "BatchNorm")
    bn.num_batches_tracked.add_(groups)
    if _loops(x, groups) and bn.stats_sink is None:  # K-sample calls in turn, running statistics in place
        return torch.cat([F.batch_norm(part, bn.running_mean, bn.running_var, bn.weight, bn.bias, True,
                                       bn.momentum, bn.eps) for part in x.chunk(groups)])
    # Momentum 1 into fresh buffers: the kernel hands back each group's mean and unbiased variance.
    mean, var = x.new_zeros(x.shape[1] * groups), x.new_ones(x.shape[1] * groups)
    y = _grouped(x, groups, bn.weight, bn.bias, bn.eps, mean, var)
    batch_stats.absorb(bn, mean.view(groups, -1), var.view(groups, -1), values)
    return y


def _batch_statistics(bn, x: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    """BN at `eps` with the batch's (or each ghost batch's) statistics, running statistics untouched: the
    graph `eps_grad`'s gradient comes from, over the groups `_train_groups` takes (the same kernel calls)."""
    if groups == 1:
        return F.batch_norm(x, None, None, bn.weight, bn.bias, True, 0.0, eps)
    if _loops(x, groups):
        return torch.cat([F.batch_norm(part, None, None, bn.weight, bn.bias, True, 0.0, eps)
                          for part in x.chunk(groups)])
    return _grouped(x, groups, bn.weight, bn.bias, eps)


def _grouped(x: torch.Tensor, groups: int, weight, bias, eps: float, mean=None, var=None) -> torch.Tensor:
    """BN of each of `groups` ghost batches of x by its own statistics in one kernel call, over the groups'
    channels side by side (batch_stats.to_groups); `mean` and `var` (G C each), when given, take each
    group's statistics (momentum 1)."""
    weight = None if weight is None else weight.repeat(groups)
    bias = None if bias is None else bias.repeat(groups)
    y = F.batch_norm(batch_stats.to_groups(x, groups), mean, var, weight, bias, True, 1.0, eps)
    return batch_stats.from_groups(y, groups)


def _check_positions(positions, layout: str, ghost_batch: int | None) -> None:
    if isinstance(positions, bool) or not isinstance(positions, int) or positions < 1:
        raise UserError(f"BatchNorm positions must be a number of spatial positions >= 1 (got {positions!r})",
                        "set norm.positions=k (k random positions per image), or null for all of them")
    if layout != "image":
        raise UserError(f"norm.positions samples spatial positions, which {layout} features do not have",
                        "use it with model=cnn (BatchNorm on images), or leave norm.positions=null")
    if ghost_batch is not None:
        raise UserError("norm.positions combines with neither norm.ghost_batch nor norm.impl=scratch",
                        "set one of them only")


@register(NormSpec(
    name="bn", full_name="BatchNorm",
    stats_over="batch (+ H, W / + T) per channel, or each ghost batch; running stats at eval",
    batch_dependent=True, params="scale, shift per channel",
    paper="Ioffe & Szegedy 2015, arXiv 1502.03167",
))
# Defaults are PyTorch's (eps 1e-5, momentum 0.1), which follow the paper; eps_grad None: eps's own gradient.
def build_bn(num_features: int, layout: str, *, eps: float = 1e-5, momentum: float = 0.1,
             affine: bool = True, masked: bool = True, ghost_batch: int | None = None,
             positions: int | None = None, eps_grad: float | None = None) -> nn.Module:
    batch_stats.check_option(ghost_batch, "BatchNorm")
    batch_stats.check_eps_grad(eps_grad, "BatchNorm")
    if positions is not None:
        _check_positions(positions, layout, ghost_batch)
        return BatchNorm(num_features, layout, eps=eps, momentum=momentum, affine=affine, positions=positions,
                         eps_grad=eps_grad)
    return BatchNorm(num_features, layout, eps=eps, momentum=momentum, affine=affine, masked=masked,
                     ghost_batch=ghost_batch, eps_grad=eps_grad)
