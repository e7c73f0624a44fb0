"""WeightNorm (Salimans & Kingma 2016) and Cosine Normalization (Luo et al. 2017): norms of the layer
before the activation, not of its output. Their NormSpec's linear/conv2d builders make that layer; the
activation norm a model asks for is the identity.

    make = norms.factory("wn")                # or "cn"
    layer = make.conv2d(32, 64, 3, padding=1) # w = g v / ||v||  (cn: cos(w, x) instead of w . x)
    act = make(64, "image")                   # identity
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from normbench.errors import UserError
from normbench.norms.basic import Identity
from normbench.norms.registry import NormSpec, register


def wn_linear(in_features: int, out_features: int, bias: bool = True) -> nn.Module:
    return weight_norm(nn.Linear(in_features, out_features, bias=bias), dim=0)


def wn_conv2d(in_channels: int, out_channels: int, kernel_size, **kwargs) -> nn.Module:
    return weight_norm(nn.Conv2d(in_channels, out_channels, kernel_size, **kwargs), dim=0)


@register(NormSpec(
    name="wn", full_name="WeightNorm",
    stats_over="weights: w = g v / ||v|| per output unit (no activation statistics)",
    batch_dependent=False, params="direction v and gain g per output unit (in the layer)",
    paper="Salimans & Kingma 2016, arXiv 1602.07868",
    linear=wn_linear, conv2d=wn_conv2d,
))
def build_wn(num_features: int, layout: str) -> nn.Module:
    return Identity()


class CosineLinear(nn.Linear):
    """Pre-activation cos(w, x) = w . x / (|w| |x|), bounded in [-1, 1]. The bias joins the cosine as
    w_0 with x_0 = 1, so |x| >= 1 and an all-zero input is no division by zero."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, eps: float = 1e-8):
        super().__init__(in_features, out_features, bias=bias)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dot = F.linear(x, self.weight, self.bias)
        x_sq = (x * x).sum(-1, keepdim=True)
        w_sq = (self.weight * self.weight).sum(1)
        if self.bias is not None:
            x_sq, w_sq = x_sq + 1, w_sq + self.bias * self.bias
        # Clamp before the root: sqrt's gradient at an all-zero input (h_0 in an RNN) would be infinite.
        return dot * torch.rsqrt((x_sq * w_sq).clamp_min(self.eps ** 2))


class CosineConv2d(nn.Conv2d):
    """Cosine normalization of a convolution: each output is the cosine between a filter and the input
    patch under it, |patch| from a convolution of x^2 with a ones kernel (zero padding counts as zeros)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, *, eps: float = 1e-8, **kwargs):
        super().__init__(in_channels, out_channels, kernel_size, **kwargs)
        if self.groups != 1 or self.padding_mode != "zeros":
            raise UserError("cosine normalization supports plain convolutions only (groups=1, zero padding)")
        self.eps = eps
        self.register_buffer("ones", torch.ones(1, in_channels, *self.kernel_size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dot = self._conv_forward(x, self.weight, self.bias)
        x_sq = F.conv2d(x * x, self.ones, None, self.stride, self.padding, self.dilation)
        w_sq = (self.weight * self.weight).sum((1, 2, 3))
        if self.bias is not None:
            x_sq, w_sq = x_sq + 1, w_sq + self.bias * self.bias
        return dot * torch.rsqrt((x_sq * w_sq.view(1, -1, 1, 1)).clamp_min(self.eps ** 2))


def cn_linear(in_features: int, out_features: int, bias: bool = True, *, eps: float = 1e-8) -> nn.Module:
    return CosineLinear(in_features, out_features, bias=bias, eps=eps)


def cn_conv2d(in_channels: int, out_channels: int, kernel_size, *, eps: float = 1e-8, **kwargs) -> nn.Module:
    return CosineConv2d(in_channels, out_channels, kernel_size, eps=eps, **kwargs)


@register(NormSpec(
    name="cn", full_name="Cosine Normalization",
    stats_over="weights and inputs: cos(w, x) replaces w . x in the layer",
    batch_dependent=False, params="- (the layer's own weights)",
    paper="Luo et al. 2017, arXiv 1702.05870",
    linear=cn_linear, conv2d=cn_conv2d,
))
# eps: a floor on |w| |x|, reached only by an all-zero input to a layer without bias.
def build_cn(num_features: int, layout: str, *, eps: float = 1e-8) -> nn.Module:
    return Identity()
