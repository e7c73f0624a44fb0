"""S tanh RNN layers (torch's nn.RNN, one layer, batch first) packed into one recurrence.

    h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh),  h_0 = 0,  for each member's own W, b

Every step's input projection is one batched matmul over all members and steps. The recurrence is one
autograd Function: its forward is a loop of S-batched matmuls (`baddbmm`) with no graph recorded per step,
its backward walks the steps back with one `bmm` each, and the gradient of W_hh is a single batched
matmul over all steps at the end. Autograd on the unrolled loop would record ~5 nodes per step and
accumulate W_hh's gradient step by step (streaming S recurrent matrices through memory once more per
step); docs/bench.md measures the difference.

The same Function trains a single tanh RNN faster than torch's own on the CPU at the batches the small-
batch studies use (`one_member`; `normbench bench --sections cells` measures it against nn.RNN), so a plain
run's `cells.TorchRNN` takes it there.
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.pack.linear import batched_linear


class _Recurrence(torch.autograd.Function):
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


class PackedRNN(nn.Module):
    """S members' `cells.TorchRNN` layers; "m" layout: (S, N, T, in) -> (S, N, T, H)."""

    layout = "m"

    @staticmethod
    def takes(m: nn.Module) -> bool:
        return (isinstance(m, nn.RNN) and m.mode == "RNN_TANH" and m.num_layers == 1 and m.bias and m.batch_first
                and not m.bidirectional and m.proj_size == 0)

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
        return _Recurrence.apply(pre, self.weight_hh).permute(1, 2, 0, 3)

    @torch.no_grad()
    def unpack(self, modules: list[nn.RNN]) -> None:
        for k, m in enumerate(modules):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(m, f"{name}_l0").copy_(getattr(self, name)[k])


# Up to this batch, training one tanh RNN layer through `_Recurrence` beat torch's nn.RNN (forward +
# backward) on the CPU in `normbench bench --sections cells` (docs/bench.md); past it, torch's fused kernel.
ONE_MEMBER_MAX_BATCH = 32


def one_member(rnn: nn.RNN, x: torch.Tensor) -> torch.Tensor:
    """`rnn(x)[0]` for one batch-first, single-layer tanh nn.RNN, computed as a pack of one: (N, T, in) ->
    (N, T, H), the same function of the same parameters (tests/test_pack.py checks it in float64)."""
    pre = torch.nn.functional.linear(x, rnn.weight_ih_l0, rnn.bias_ih_l0 + rnn.bias_hh_l0)  # (N, T, H)
    out = _Recurrence.apply(pre.transpose(0, 1).unsqueeze(1).contiguous(), rnn.weight_hh_l0.unsqueeze(0))
    return out.squeeze(1).transpose(0, 1)
