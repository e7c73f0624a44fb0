"""S members' linear layers as one batched matmul, with a backward that keeps bmm on its fast paths.

    y = batched_linear(x, w, b)     # x (S, ..., in), w (S, out, in), b (S, 1, out) -> (S, ..., out)

The packed linears (layers.PackedLinear) and the packed RNN's input projection (rnn.PackedRNN) use it.
"""

from __future__ import annotations

import torch


class _BatchedLinear(torch.autograd.Function):
    """y[s] = x[s] W[s]^T + b[s] for (S, N, in) x, (S, out, in) W, (S, 1, out) b, with a backward that gives
    torch's bmm contiguous operands: autograd's own (the gradient of W as bmm(x^T, g) on a transposed
    view) ran 4x slower on the CPU at batch 2, and W stored transposed made autograd copy its gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        wt = w.transpose(1, 2)
        return torch.bmm(x, wt) if b is None else torch.baddbmm(b, x, wt)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, w = ctx.saved_tensors
        g = g.contiguous()
        gx = torch.bmm(g, w) if ctx.needs_input_grad[0] else None
        gw = torch.bmm(g.transpose(1, 2).contiguous(), x) if ctx.needs_input_grad[1] else None
        gb = g.sum(1, keepdim=True) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb


def batched_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """(S, ..., in) -> (S, ..., out) with each member's own weight (S, out, in) and bias (S, 1, out)."""
    shape = x.shape
    y = _BatchedLinear.apply(x.reshape(shape[0], -1, shape[-1]).contiguous(), w, b)  # strided: bmm slow paths
    return y.view(*shape[:-1], -1)
