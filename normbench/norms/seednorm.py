"""SeeDNorm (Cai, Zhu, Liu & Min, "SeeDNorm: Self-Rescaled Dynamic Normalization", ICLR 2026, arXiv
2510.22777): RMSNorm whose per-channel scale depends on the input itself.

    SeeDNorm(x) = [tanh(x . beta) * alpha + gamma] * x / RMS(x),    RMS(x) = sqrt(mean_i x_i^2 + eps)

per token: x is one token's C features, beta, alpha and gamma are learned vectors over the C channels.
x . beta is one number per token, so tanh(x . beta) * alpha is a per-channel rescaling that moves with the
input's direction and norm (the norm RMSNorm's output discards), added to RMSNorm's static gain gamma.

What this follows (found with the search tool; the paper's PDF itself was not in the store): the equation
above and the roles of alpha, beta, gamma from a review of the paper that writes its Eq. 1 out (sigma =
tanh, alpha, beta, gamma in R^{1 x D}, RMS with eps inside the root); the initial values from the one public
implementation found, swiss-ai/Megatron-LM's SeeDNorm (megatron/core/transformer/torch_norm.py, "following
the SeeDNorm pseudocode", merged Nov 2025): alpha = ones * init with init 1.0, beta = zeros, gamma = ones,
eps 1e-6, single head. With beta = 0 the layer starts as exactly RMSNorm (tanh(0) = 0), and alpha = 1 lets
beta's gradient through from the first step. That implementation also puts weight decay on alpha and beta
but not on gamma ("according to the paper", its pull request says); normbench applies `weight_decay` (0 by
default) to every parameter alike, so this is not reproduced.

Assumed, as no source available here settles it: summaries of the paper mention a multi-head variant
(taken here as the input and beta split into heads, one tanh(x_h . beta_h) per head, which keeps each dot
product over C/G features), without saying which form its experiments use. `norm.groups` (default 1, the
single-head Eq. 1 that the implementation above computes) selects it: G contiguous heads of C/G channels,
each scaling its own channels by tanh(x_h . beta_h) * alpha_h + gamma_h; RMS(x) stays over all C features.

Layouts: flat (N, C) (a sample is a token) and seq (N, T, C) (per token, so padding changes nothing else and
the mask is unused). On images (N, C, H, W) each position's C channels form the token, as ConvNeXt's
channels-first LayerNorm does: unlike the catalog's `rms`, whose statistics on images cover (C, H, W) of a
sample. `norm.affine=false` fixes gamma at 1 (alpha and beta stay: they are the
method).

    seed = norms.create("seednorm", 64, "seq")                 # (N, T, C)
    norms.create("seednorm", 64, "seq", groups=4, alpha_init=0.5)
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms.group import check_groups
from normbench.norms.registry import NormSpec, register


class SeeDNorm(nn.Module):
    """[tanh(x_h . beta_h) * alpha + gamma] * x / RMS(x) over the channels of each token (each position of
    an image), with G heads h of C/G contiguous channels (G = 1: the paper's Eq. 1)."""

    def __init__(self, num_features: int, layout: str, *, alpha_init: float, groups: int, eps: float,
                 affine: bool):
        super().__init__()
        check_groups(groups, num_features, "image", name="SeeDNorm")  # any divisor of C, C itself included
        self.channels_first = layout == "image"
        self.groups, self.eps = groups, eps
        self.alpha = nn.Parameter(torch.full((num_features,), float(alpha_init)))
        self.beta = nn.Parameter(torch.zeros(num_features))
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None  # gamma

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        t = x.movedim(1, -1) if self.channels_first else x  # (..., C): one token per row
        heads = t.unflatten(-1, (self.groups, -1))  # (..., G, C/G)
        dot = (heads * self.beta.view(self.groups, -1)).sum(-1, keepdim=True)  # x_h . beta_h: (..., G, 1)
        scale = (torch.tanh(dot) * self.alpha.view(self.groups, -1)).flatten(-2)  # (..., C)
        scale = scale + (1.0 if self.weight is None else self.weight)
        y = scale * t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.movedim(-1, 1) if self.channels_first else y

    def extra_repr(self) -> str:
        return f"{self.alpha.numel()}, groups={self.groups}, eps={self.eps}, affine={self.weight is not None}"


@register(NormSpec(
    name="seednorm", full_name="SeeDNorm (Self-Rescaled Dynamic Normalization)",
    stats_over="like RMS per token (C; C per position on images), scale tanh(x.beta) alpha + gamma",
    batch_dependent=False, params="alpha, beta and gamma (scale) per channel",
    paper="Cai et al. 2025, arXiv 2510.22777 (ICLR 2026)",
))
def build_seednorm(num_features: int, layout: str, *, alpha_init: float = 1.0, groups: int = 1, eps: float = 1e-6,
                   affine: bool = True) -> nn.Module:
    return SeeDNorm(num_features, layout, alpha_init=alpha_init, groups=groups, eps=eps, affine=affine)
