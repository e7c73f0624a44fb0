"""S tanh RNN layers (torch's nn.RNN, one layer, batch first) packed into one recurrence.

    h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh),  h_0 = 0,  for each member's own W, b

Every step's input projection is one batched matmul over all members and steps; the recurrence is
normbench.models.recurrence's autograd Function, the one a plain run's tanh RNN uses too.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.models.recurrence import Recurrence, fits
from normbench.pack.linear import batched_linear


class PackedRNN(nn.Module):
    """S members' `cells.TorchRNN` layers; "m" layout: (S, N, T, in) -> (S, N, T, H)."""

    layout = "m"

    takes = staticmethod(fits)

    def __init__(self, modules: list[nn.RNN]):
        super().__init__()
        stack = lambda name: nn.Parameter(torch.stack([getattr(m, name).detach() for m in modules]))  # noqa: E731
        self.weight_ih, self.weight_hh = stack("weight_ih_l0"), stack("weight_hh_l0")
        self.bias_ih, self.bias_hh = stack("bias_ih_l0"), stack("bias_hh_l0")

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        s, n, steps, size = x.shape
        bias = (self.bias_ih + self.bias_hh)[:, None]
        pre = batched_linear(x.reshape(s, n * steps, size), self.weight_ih, bias)
        pre = pre.view(s, n, steps, -1).permute(2, 0, 1, 3).contiguous()  # time first: each step contiguous
        return Recurrence.apply(pre, self.weight_hh).permute(1, 2, 0, 3)

    @torch.no_grad()
    def unpack(self, modules: list[nn.RNN]) -> None:
        for k, m in enumerate(modules):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(m, f"{name}_l0").copy_(getattr(self, name)[k])
