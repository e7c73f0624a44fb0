"""Filter Response Normalization with its Thresholded Linear Unit (Singh & Krishnan 2020).

    frn = norms.create("frn", 64, "image")    # max(gamma x / sqrt(nu^2 + eps) + beta, tau)

nu^2 is the mean of x^2 over H, W per sample per channel: no centering, no batch. FRN includes its own
activation (TLU); a ReLU after it turns max(y, tau) into max(y, max(tau, 0)), so models should ask
`make.activation()` (nothing after FRN) rather than always adding one.
On flat and seq features each channel holds one value, so nu^2 = x^2 and FRN becomes x / sqrt(x^2 + eps);
the paper's remedy for such 1x1 maps is a learned eps, which `learn_eps` (default: on there) turns on:
eps + |eps_l| with eps_l a learned scalar per channel, initialized to 1e-4 (our choice; the paper
gives none).
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms.common import BROADCAST
from normbench.norms.fused import frn_tlu
from normbench.norms.registry import NormSpec, register

LEARNED_EPS_INIT = 1e-4


class FilterResponseNorm(nn.Module):
    def __init__(self, num_features: int, layout: str, *, eps: float, learn_eps: bool):
        super().__init__()
        self.layout, self.eps = layout, eps
        self.weight = nn.Parameter(torch.ones(num_features))  # gamma
        self.bias = nn.Parameter(torch.zeros(num_features))  # beta
        self.tau = nn.Parameter(torch.zeros(num_features))  # the TLU's learned threshold
        self.eps_l = nn.Parameter(torch.full((num_features,), LEARNED_EPS_INIT)) if learn_eps else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        shape, red = BROADCAST[self.layout]
        eps_l = None if self.eps_l is None else self.eps_l.view(shape)
        return frn_tlu(x, self.weight.view(shape), self.bias.view(shape), self.tau.view(shape), eps_l, self.eps, red)

    def extra_repr(self) -> str:
        return f"layout={self.layout}, eps={self.eps}, learn_eps={self.eps_l is not None}"


@register(NormSpec(
    name="frn", full_name="Filter Response Norm + TLU",
    stats_over="H, W per sample per channel (mean square), no centering",
    batch_dependent=False, params="scale, shift, TLU threshold per channel (+ learned eps on flat/seq)",
    paper="Singh & Krishnan 2020, arXiv 1911.09737",
    own_activation=True,
))
# eps 1e-6: the paper's.
def build_frn(num_features: int, layout: str, *, eps: float = 1e-6, learn_eps: bool | None = None) -> nn.Module:
    learn = layout != "image" if learn_eps is None else learn_eps
    return FilterResponseNorm(num_features, layout, eps=eps, learn_eps=learn)
