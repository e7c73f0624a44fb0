"""Hand-written backward passes for FRN and EvoNorm-S0, which PyTorch has no kernel for.

    z = frn_tlu(x, gamma, beta, tau, eps_l, eps, red)        # shapes: parameters broadcast against x
    y = evonorm_s0(x, v, gamma, beta, groups, eps, layout)

Autograd through their elementwise formulas records ~20-30 full-size ops per forward+backward (and
torch.maximum's backward alone cost more than BatchNorm on CPU); these compute the same gradients in about half
the passes. tests/test_norms_reference.py checks them with torch.autograd.gradcheck in float64.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

Tensor = torch.Tensor


class _FRN(torch.autograd.Function):
    """max(gamma * x / sqrt(nu2 + eps) + beta, tau); nu2 = mean of x^2 over H, W (image) or x^2 itself."""

    @staticmethod
    def forward(ctx, x, gamma, beta, tau, eps_l, eps: float, red: tuple):
        image = x.dim() == 4
        nu2 = (x * x).mean((2, 3), keepdim=True) if image else x * x
        e = eps if eps_l is None else eps_l.abs() + eps
        r = torch.rsqrt(nu2.add_(e))
        xhat = x * r
        # max(y, tau) = relu(y - tau) + tau: relu's kernels (and its backward below) are fast on CPU, where
        # torch.maximum's backward and torch.where measured slower than all of BatchNorm.
        above = torch.mul(xhat, gamma).add_(beta - tau).relu_()
        ctx.red, ctx.image = red, image
        ctx.save_for_backward(xhat, r, above, gamma, eps_l)
        return above + tau

    @staticmethod
    @once_differentiable
    def backward(ctx, gz):
        xhat, r, above, gamma, eps_l = ctx.saved_tensors
        red = ctx.red
        gy = torch.ops.aten.threshold_backward(gz, above, 0)  # gz where y > tau, else 0 (relu's backward)
        gbeta = gy.sum(red, keepdim=True)
        gtau = gz.sum(red, keepdim=True) - gbeta
        if ctx.image:  # d(x r)/dx = r (I - xhat xhat^T / HW) per (sample, channel)
            t = torch.mul(gy, xhat).sum((2, 3), keepdim=True)
            ggamma = t.sum(0, keepdim=True)
            k = gamma * r
            dx = gy.mul_(k).addcmul_(xhat, k * t / (xhat.shape[2] * xhat.shape[3]), value=-1.0)
            ge = -0.5 * (r * r * gamma * t)
        else:  # nu2 = x^2: d(x r)/dx = r (1 - xhat^2)
            ggamma = (gy * xhat).sum(red, keepdim=True)
            gxhat = gy.mul_(gamma)
            ge = -0.5 * gxhat * xhat * r * r
            dx = gxhat.mul_(r).mul_(1 - xhat * xhat)
        geps = None if eps_l is None else ge.sum(red, keepdim=True) * eps_l.sign()
        return dx, ggamma, gbeta, gtau, geps, None, None


def frn_tlu(x: Tensor, gamma: Tensor, beta: Tensor, tau: Tensor, eps_l: Tensor | None, eps: float,
            red: tuple) -> Tensor:
    return _FRN.apply(x, gamma, beta, tau, eps_l, eps, red)


def _groups(x: Tensor, groups: int, layout: str) -> Tensor:
    """x viewed with each normalization group on the last axis."""
    if layout == "seq":
        return x.reshape(*x.shape[:2], groups, -1)
    return x.reshape(x.shape[0], groups, -1)


def _per_channel(stat: Tensor, x: Tensor, layout: str) -> Tensor:
    """A per-group statistic (..., G, 1) broadcast to x's channels: (N, C, 1, 1), (N, C) or (N, T, C)."""
    if layout == "seq":
        return stat.expand(*stat.shape[:-1], x.shape[-1] // stat.shape[-2]).reshape(x.shape)
    n, c = x.shape[:2]
    return stat.expand(n, stat.shape[1], c // stat.shape[1]).reshape(n, c, *([1] * (x.dim() - 2)))


class _EvoNormS0(torch.autograd.Function):
    """x * sigmoid(v x) / sqrt(var_group(x) + eps) * gamma + beta."""

    @staticmethod
    def forward(ctx, x, v, gamma, beta, groups: int, eps: float, layout: str, red: tuple):
        # Full-size temporaries are few and updated in place: on CPU each new one costs page faults.
        s = torch.mul(x, v).sigmoid_()
        xg = _groups(x, groups, layout)
        mean = xg.mean(-1, keepdim=True)
        inv = torch.rsqrt((xg - mean).square_().mean(-1, keepdim=True) + eps)  # (..., G, 1)
        a = _per_channel(inv, x, layout) * gamma
        ctx.groups, ctx.layout, ctx.red = groups, layout, red
        ctx.save_for_backward(x, s, mean, inv, v, gamma)
        return torch.mul(x, s).mul_(a).add_(beta)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, s, mean, inv, v, gamma = ctx.saved_tensors
        layout, red = ctx.layout, ctx.red
        inv_c = _per_channel(inv, x, layout)
        gbeta = g.sum(red, keepdim=True)
        # Through 1 / std: u = sum over H, W of g * num, per (sample, channel).
        gnum_x = torch.mul(x, s).mul_(g)
        u = gnum_x.sum((2, 3), keepdim=True) if x.dim() == 4 else gnum_x
        ggamma = (u * inv_c).sum(red, keepdim=True)
        ug = _groups(u * gamma, ctx.groups, layout).sum(-1, keepdim=True)  # d/d inv, per group
        size = _groups(x, ctx.groups, layout).shape[-1]  # values per group
        gvar = ug * inv ** 3 * (-1.0 / size)  # d inv/d var = -inv^3 / 2, d var/dx = 2 (x - mean) / size
        dx = torch.sub(x, _per_channel(mean, x, layout)).mul_(_per_channel(gvar, x, layout))
        # Through num = x sigmoid(v x): dnum/dx = s + v x s (1 - s).
        q = torch.mul(g, inv_c * gamma).mul_(s)
        w = torch.addcmul(q, q, s, value=-1.0).mul_(x)  # q (1 - s) x
        dx.add_(q).addcmul_(w, v)
        gv = w.mul_(x).sum(red, keepdim=True)
        return dx, gv, ggamma, gbeta, None, None, None, None


def evonorm_s0(x: Tensor, v: Tensor, gamma: Tensor, beta: Tensor, groups: int, eps: float, layout: str,
               red: tuple) -> Tensor:
    return _EvoNormS0.apply(x, v, gamma, beta, groups, eps, layout, red)
