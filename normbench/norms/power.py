"""PowerNorm (Shen, Yao, Gholami, Mahoney & Keutzer 2020, arXiv 2003.07845, Algorithm 1): BatchNorm without
centering, whose forward pass divides by a *running* quadratic mean, with the paper's approximate backward.

Training step t, per channel (x over the batch, and H, W or the real tokens T; B values):

    psi_B^2   = mean(x^2)                                    this batch's quadratic mean
    x_hat     = x / sqrt(psi_{t-1}^2 + eps)                  the previous steps' running value, not psi_B
    y         = gamma * x_hat + beta
    psi_t^2   = (1 - m) psi_{t-1}^2 + m psi_B^2              m = norm.momentum (0.1: the paper's alpha = 0.9)
  backward, g = gamma * dL/dy:
    g'        = g - nu_{t-1} x_hat                           nu: a running estimate of mean(g x_hat)
    dL/dx     = g' / sqrt(psi_{t-1}^2 + eps)
    nu_t      = nu_{t-1} (1 - m mean(x_hat^2)) + m mean(x_hat g)

Inference divides by the final psi. Because the forward pass uses only earlier batches' statistics, a
sample's output never depends on the rest of its batch; the batch enters through psi and nu, which a
training step (autograd on) updates. Evaluation in training mode (no autograd) leaves them alone, so
"batch statistics at test" equal the running ones by construction (`batch_dependent=False`).

Inside a recurrent cell (model.placement=recurrent) the layer is called once per time step, and each call
counts as a batch of its own: psi and nu move T times a training step. On sequences with a mask, every mean above is over real tokens only; padded tokens output 0 and pass no
gradient (the masked BN of the paper's Transformer). Deviations from the authors' released code (fairseq
mask_powernorm.py), which the paper's algorithm does not have: a warm-up that divides by psi_B at first,
and a backward that divides by the current batch's psi_B. psi starts at 1 and nu at 0.

    pn = norms.create("pn", 64, "seq")      # (N, T, C), mask (N, T)
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms.common import BROADCAST
from normbench.norms.registry import NormSpec, register

Tensor = torch.Tensor


class _PowerFunction(torch.autograd.Function):
    """Algorithm 1's step: y from psi_{t-1}, and the approximate gradient; updates psi and nu in place."""

    @staticmethod
    def forward(ctx, x, weight, bias, psi2, nu, w, count, momentum, eps, view, dims):
        scale = (psi2 + eps).rsqrt()  # psi_{t-1}, before this batch updates it
        x_hat = x * scale.view(view)
        if w is not None:
            x_hat = x_hat * w
        psi2.mul_(1 - momentum).add_(momentum * ((x * x if w is None else x * x * w).sum(dims) / count))
        ctx.save_for_backward(x_hat, scale, weight, w)
        ctx.nu = nu  # read and updated when the gradient arrives: nu_{t-1} is whatever it is then
        ctx.momentum, ctx.view, ctx.dims, ctx.count = momentum, view, dims, count
        y = x_hat if weight is None else x_hat * weight.view(view) + bias.view(view)
        return y if w is None else y * w

    @staticmethod
    def backward(ctx, grad_y):
        x_hat, scale, weight, w = ctx.saved_tensors
        nu = ctx.nu
        view, dims, m = ctx.view, ctx.dims, ctx.momentum
        if w is not None:
            grad_y = grad_y * w
        g = grad_y if weight is None else grad_y * weight.view(view)
        g_approx = g - nu.view(view) * x_hat  # x_hat is 0 on padding, and so is g
        gamma_b = (x_hat * x_hat).sum(dims) / ctx.count
        lambda_b = (x_hat * g).sum(dims) / ctx.count
        nu.mul_(1 - m * gamma_b).add_(m * lambda_b)
        grad_x = g_approx * scale.view(view)
        grad_w = grad_b = None
        if weight is not None:
            grad_w, grad_b = (grad_y * x_hat).sum(dims), grad_y.sum(dims)
        return grad_x, grad_w, grad_b, None, None, None, None, None, None, None, None


class PowerNorm(nn.Module):
    def __init__(self, num_features: int, layout: str, *, eps: float, momentum: float, affine: bool,
                 masked: bool):
        super().__init__()
        self.layout, self.eps, self.momentum, self.masked = layout, eps, momentum, masked
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features)) if affine else None
        self.register_buffer("running_phi", torch.ones(num_features))  # psi^2 (the authors' name)
        self.register_buffer("running_nu", torch.zeros(num_features))  # the backward's estimate of mean(g x_hat)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        view, dims = BROADCAST[self.layout]
        w = mask.unsqueeze(-1).to(x.dtype) if mask is not None and self.masked and self.layout == "seq" else None
        if self.training and torch.is_grad_enabled():
            count = x.numel() // len(self.running_phi) if w is None else w.sum()  # values per channel
            return _PowerFunction.apply(x, self.weight, self.bias, self.running_phi, self.running_nu, w, count,
                                        self.momentum, self.eps, view, dims)
        y = x * (self.running_phi + self.eps).rsqrt().view(view)
        if self.weight is not None:
            y = y * self.weight.view(view) + self.bias.view(view)
        return y if w is None else y * w

    def extra_repr(self) -> str:
        return f"{len(self.running_phi)}, eps={self.eps}, momentum={self.momentum}, masked={self.masked}"


@register(NormSpec(
    name="pn", full_name="PowerNorm",
    stats_over="batch (+H,W / +real tokens) per channel, quadratic mean only, running value in the forward",
    batch_dependent=False, params="scale and shift per channel", exact_gradient=False,
    paper="Shen et al. 2020, arXiv 2003.07845",
))
def build_pn(num_features: int, layout: str, *, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
             masked: bool = True) -> nn.Module:
    return PowerNorm(num_features, layout, eps=eps, momentum=momentum, affine=affine, masked=masked)
