"""The tanh recurrence h_t = tanh(pre_t + h_{t-1} W_hh^T) as one autograd Function over a member axis, used
by a plain run's tanh RNN (`one_member`) and by a pack's (normbench.pack.rnn.PackedRNN).

    out = Recurrence.apply(pre, w_hh)       # pre (T, S, N, H): input projections with both biases; w_hh (S, H, H)
    out = one_member(rnn, x)                # rnn(x)[0] for one batch-first single-layer tanh nn.RNN

Its forward is a loop of S-batched matmuls (`baddbmm`) with no graph recorded per step, its backward
walks the steps back with one `bmm` each, and the gradient of W_hh is a single batched matmul over all
steps at the end. Autograd on the unrolled loop would record ~5 nodes per step and accumulate W_hh's
gradient step by step; docs/bench.md measures the difference. It trains a single tanh RNN faster than
torch's own on the CPU at the batches the small-batch studies use (`normbench bench --sections cells`).
"""

from __future__ import annotations

import torch
from torch import nn


class Recurrence(torch.autograd.Function):
    """(pre (T, S, N, H) = the input projections with both biases, w_hh (S, H, H)) -> h (T, S, N, H)."""

    @staticmethod
    def forward(ctx, pre: torch.Tensor, w_hh: torch.Tensor) -> torch.Tensor:
        steps = pre.shape[0]
        out = torch.empty_like(pre)
        w = w_hh.transpose(1, 2)
        torch.tanh(pre[0], out=out[0])
        for t in range(1, steps):
            torch.tanh(torch.baddbmm(pre[t], out[t - 1], w), out=out[t])
        ctx.save_for_backward(out, w_hh)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out, w_hh = ctx.saved_tensors
        steps = out.shape[0]
        d_pre = torch.empty_like(out)
        slope = 1 - out * out  # tanh'
        dh = grad[steps - 1]
        for t in range(steps - 1, -1, -1):
            torch.mul(dh, slope[t], out=d_pre[t])
            if t:
                dh = torch.baddbmm(grad[t - 1], d_pre[t], w_hh)
        # dW_hh[s] = sum_t d_pre[t, s]^T h[t-1, s]: one matmul over all steps (h_{-1} = 0 adds nothing)
        s, n, h = out.shape[1:]
        lhs = d_pre[1:].permute(1, 3, 0, 2).reshape(s, h, -1)
        rhs = out[:-1].permute(1, 0, 2, 3).reshape(s, -1, h)
        return d_pre, torch.bmm(lhs, rhs)


# Up to this batch, training one tanh RNN layer through `Recurrence` beat torch's nn.RNN (forward +
# backward) on the CPU in `normbench bench --sections cells` (docs/bench.md); past it, torch's fused kernel.
ONE_MEMBER_MAX_BATCH = 32


def fits(m: nn.Module) -> bool:
    """Is `m` what the recurrence computes: a batch-first, single-layer, unidirectional tanh nn.RNN with biases?"""
    return (isinstance(m, nn.RNN) and m.mode == "RNN_TANH" and m.num_layers == 1 and m.bias and m.batch_first
            and not m.bidirectional and m.proj_size == 0)


def one_member(rnn: nn.RNN, x: torch.Tensor) -> torch.Tensor:
    """`rnn(x)[0]` for one batch-first, single-layer tanh nn.RNN, computed as a pack of one: (N, T, in) ->
    (N, T, H), the same function of the same parameters (tests/test_pack.py checks it in float64)."""
    pre = torch.nn.functional.linear(x, rnn.weight_ih_l0, rnn.bias_ih_l0 + rnn.bias_hh_l0)  # (N, T, H)
    out = Recurrence.apply(pre.transpose(0, 1).unsqueeze(1).contiguous(), rnn.weight_hh_l0.unsqueeze(0))
    return out.squeeze(1).transpose(0, 1)
