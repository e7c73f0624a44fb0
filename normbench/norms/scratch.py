"""From-scratch twins of the norms PyTorch ships (bn, ln, in, gn, rms, wn), written from the papers'
definitions with plain tensor arithmetic. tests/test_norms_scratch.py checks
each equal to the native kernel (outputs, gradients, running statistics).

    bn = norms.create("bn", 32, "image", impl="scratch")
    layer = norms.factory("wn", impl="scratch").linear(784, 256)

They are for reading and verification; the native kernels are faster and stay the default. Each is
registered as its native builder's twin at the end of this module (`registry.twin`): the registry
passes it the native builder's arguments and options, defaults included, and picks it for
`impl="scratch"` in one place.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from normbench.errors import UserError
from normbench.norms.batch_stats import (BatchStatistics, check_eps_grad, check_option, grouped_masked_moments,
                                         num_groups, split_eps, splits_eps)
from normbench.norms.common import batch_dims, channel_shape, check_batch_values, check_spatial
from normbench.norms.group import check_groups
from normbench.norms.registry import twin

Tensor = torch.Tensor


class _Affine(nn.Module):
    """A per-channel scale (gamma, init 1) and shift (beta, init 0), as every paper here defines them."""

    def __init__(self, num_features: int, affine: bool, shift: bool = True):
        super().__init__()
        self.affine = affine
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features)) if affine and shift else None

    def scale_shift(self, y: Tensor, shape: tuple[int, ...]) -> Tensor:
        if self.weight is not None:
            y = y * self.weight.view(shape)
        if self.bias is not None:
            y = y + self.bias.view(shape)
        return y


class ScratchBatchNorm(BatchStatistics, _Affine):
    """Ioffe & Szegedy, Algorithms 1-2: mu_B = mean over the batch (+ H, W / real tokens) per channel,
    var_B = mean (x - mu_B)^2, x_hat = (x - mu_B) / sqrt(var_B + eps), y = gamma x_hat + beta. Training
    keeps running averages (variance made unbiased, m / (m - 1)) that eval uses instead. Ghost batches
    (Hoffer et al., section 4.1) are literally that: the batch split into groups of K samples, each run
    through the same steps in turn. `eps_grad` (the native layer's option): in training, x_hat's numbers at
    eps and its gradient at eps_grad, through the same mu_B and var_B (batch_stats.split_eps)."""

    def __init__(self, num_features: int, layout: str, *, eps: float, momentum: float, affine: bool,
                 masked: bool, ghost_batch: int | None = None, eps_grad: float | None = None):
        super().__init__(num_features, affine)
        self.layout, self.eps, self.momentum, self.masked = layout, eps, momentum, masked
        self.ghost_batch = ghost_batch
        self.eps_grad = None if eps_grad is None or eps_grad == eps else float(eps_grad)
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if not self.training or self.ghost_batch is None:
            return self._one_batch(x, mask)
        num_groups(x.shape[0], self.ghost_batch, "BatchNorm")
        k = self.ghost_batch
        masks = [None] * (x.shape[0] // k) if mask is None else mask.split(k)
        return torch.cat([self._one_batch(xg, mg) for xg, mg in zip(x.split(k), masks)])

    def _one_batch(self, x: Tensor, mask: Tensor | None) -> Tensor:
        shape = channel_shape(x, self.layout)
        use_mask = self.layout == "seq" and mask is not None and self.masked
        if self.training:
            if use_mask:
                w = mask.reshape(-1, 1).to(x.dtype)
                mean, var, m = (t[0] for t in grouped_masked_moments(x.reshape(-1, x.shape[-1]), w, 1))
            else:
                check_batch_values(x.reshape(-1, x.shape[-1]) if self.layout == "seq" else x, "BatchNorm")
                dims = batch_dims(self.layout)
                mean = x.mean(dims)
                var = ((x - mean.view(shape)) ** 2).mean(dims)
                m = x.numel() // x.shape[-1 if self.layout == "seq" else 1]
            with torch.no_grad():
                self.num_batches_tracked += 1
                m = torch.as_tensor(m, dtype=x.dtype, device=x.device)
                unbiased = var * m / (m - 1).clamp_min(1)
                if self.stats_sink is not None:
                    self.stats_sink(mean.detach()[None], unbiased.detach()[None], m.reshape(1))
                else:
                    new_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
                    new_var = (1 - self.momentum) * self.running_var + self.momentum * unbiased
                    # Fewer than two (real) values give no variance estimate: the averages stay.
                    self.running_mean.copy_(torch.where(m < 2, self.running_mean, new_mean))
                    self.running_var.copy_(torch.where(m < 2, self.running_var, new_var))
        else:
            mean, var = self.running_mean, self.running_var

        def normalize(eps: float) -> Tensor:
            return self.scale_shift((x - mean.view(shape)) / torch.sqrt(var.view(shape) + eps), shape)

        if splits_eps(self):
            with torch.no_grad():
                value = normalize(self.eps)
            y = split_eps(value, normalize(self.eps_grad))
        else:
            y = normalize(self.eps)
        return y * mask[..., None] if use_mask else y


class ScratchLayerNorm(_Affine):
    """Ba et al., eq. (3): mean and variance over all features of one sample (C per token; C, H, W per
    image), then a per-channel gain and bias."""

    def __init__(self, num_features: int, layout: str, *, eps: float, affine: bool):
        super().__init__(num_features, affine)
        self.layout, self.eps = layout, eps
        self.dims = {"flat": (1,), "image": (1, 2, 3), "seq": (2,)}[layout]

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        mean = x.mean(self.dims, keepdim=True)
        var = ((x - mean) ** 2).mean(self.dims, keepdim=True)
        return self.scale_shift((x - mean) / torch.sqrt(var + self.eps), channel_shape(x, self.layout))


class ScratchInstanceNorm(_Affine):
    """Ulyanov et al., eq. (2): mean and variance over H, W of each channel of each sample."""

    def __init__(self, num_features: int, *, eps: float, affine: bool):
        super().__init__(num_features, affine)
        self.eps = eps

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        check_spatial(x, "InstanceNorm")
        mean = x.mean((2, 3), keepdim=True)
        var = ((x - mean) ** 2).mean((2, 3), keepdim=True)
        return self.scale_shift((x - mean) / torch.sqrt(var + self.eps), channel_shape(x, "image"))


class ScratchGroupNorm(_Affine):
    """Wu & He, eq. (1)-(2) with S_i = the C/G channels of i's group (and H, W) in one sample."""

    def __init__(self, groups: int, num_features: int, layout: str, *, eps: float, affine: bool):
        super().__init__(num_features, affine)
        self.groups, self.layout, self.eps = groups, layout, eps

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.layout == "seq":  # (N, T, C) -> (N, T, G, C/G): groups of each token's channels
            g = x.reshape(*x.shape[:2], self.groups, -1)
            dims = (3,)
        else:  # (N, C, ...) -> (N, G, C/G * H * W)
            g = x.reshape(x.shape[0], self.groups, -1)
            dims = (2,)
        mean = g.mean(dims, keepdim=True)
        var = ((g - mean) ** 2).mean(dims, keepdim=True)
        y = ((g - mean) / torch.sqrt(var + self.eps)).reshape(x.shape)
        return self.scale_shift(y, channel_shape(x, self.layout))


class ScratchRMSNorm(_Affine):
    """Zhang & Sennrich, eq. (4): a_i / RMS(a) * g_i, RMS(a) = sqrt(mean a^2 + eps); no centering, no bias."""

    def __init__(self, num_features: int, layout: str, *, eps: float, affine: bool):
        super().__init__(num_features, affine, shift=False)
        self.layout, self.eps = layout, eps
        self.dims = {"flat": (1,), "image": (1, 2, 3), "seq": (2,)}[layout]

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        rms = torch.sqrt((x * x).mean(self.dims, keepdim=True) + self.eps)
        return self.scale_shift(x / rms, channel_shape(x, self.layout))


def _direction_norm(v: Tensor) -> Tensor:
    """||v|| over everything but the output unit (dim 0), shaped to broadcast against v."""
    return v.flatten(1).norm(dim=1).view(-1, *([1] * (v.dim() - 1)))


class ScratchWeightNormLinear(nn.Linear):
    """Salimans & Kingma, eq. (2): w = g v / ||v|| per output unit; g starts at ||v|| so w starts at v."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__(in_features, out_features, bias=bias)
        v = self.weight.detach().clone()
        del self.weight
        self.weight_v = nn.Parameter(v)
        self.weight_g = nn.Parameter(_direction_norm(v))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight_g * self.weight_v / _direction_norm(self.weight_v), self.bias)


class ScratchWeightNormConv2d(nn.Conv2d):
    """Weight normalization of a convolution: w = g v / ||v||, the norm over (C_in, kh, kw) per filter."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, **kwargs):
        super().__init__(in_channels, out_channels, kernel_size, **kwargs)
        v = self.weight.detach().clone()
        del self.weight
        self.weight_v = nn.Parameter(v)
        self.weight_g = nn.Parameter(_direction_norm(v))

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight_g * self.weight_v / _direction_norm(self.weight_v)
        return self._conv_forward(x, w, self.bias)


# The twins, each called as its native builder is (norms/batch.py, layer.py, group.py, rms.py, weight.py).
@twin("bn")
def _bn(num_features: int, layout: str, *, eps: float, momentum: float, affine: bool, masked: bool,
        ghost_batch: int | None, positions: int | None, eps_grad: float | None) -> nn.Module:
    check_option(ghost_batch, "BatchNorm")
    check_eps_grad(eps_grad, "BatchNorm")
    if positions is not None:
        raise UserError("norm.positions combines with neither norm.ghost_batch nor norm.impl=scratch",
                        "set one of them only")
    return ScratchBatchNorm(num_features, layout, eps=eps, momentum=momentum, affine=affine, masked=masked,
                            ghost_batch=ghost_batch, eps_grad=eps_grad)


@twin("ln")
def _ln(num_features: int, layout: str, *, eps: float, affine: bool) -> nn.Module:
    return ScratchLayerNorm(num_features, layout, eps=eps, affine=affine)


@twin("in")
def _in(num_features: int, layout: str, *, eps: float, affine: bool) -> nn.Module:
    return ScratchInstanceNorm(num_features, eps=eps, affine=affine)


@twin("gn")
def _gn(num_features: int, layout: str, *, groups: int, eps: float, affine: bool) -> nn.Module:
    check_groups(groups, num_features, layout)
    return ScratchGroupNorm(groups, num_features, layout, eps=eps, affine=affine)


@twin("rms")
def _rms(num_features: int, layout: str, *, eps: float, affine: bool) -> nn.Module:
    return ScratchRMSNorm(num_features, layout, eps=eps, affine=affine)


twin("wn", "linear")(ScratchWeightNormLinear)
twin("wn", "conv2d")(ScratchWeightNormConv2d)
