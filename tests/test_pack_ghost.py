"""A pack's BatchNorm over ghost batches (as an evaluation pass at the training batch size sets them) against
each member's own BatchNorm over the same groups, in float64: both run norms.batch.train_dense, the pack's
over its members' S x C channels at once. Outputs, input and parameter gradients, running statistics and
the count of updates, on flat rows and images, through both of its paths (one kernel call over the groups
folded into channels; one call per group) and with `eps_grad`."""

from __future__ import annotations

import pytest
import torch

from normbench import norms
from normbench.norms import batch
from normbench.pack.layers import PackedBatchNorm

S, K, GROUPS, C = 3, 4, 3, 5
N = K * GROUPS
TIGHT = {"rtol": 1e-10, "atol": 1e-10}


def _members(layout: str, eps_grad: float | None) -> list[torch.nn.Module]:
    out = []
    for seed in range(S):
        torch.manual_seed(seed)
        bn = norms.create("bn", C, layout, eps_grad=eps_grad).double()
        with torch.no_grad():
            bn.weight.uniform_(0.5, 2), bn.bias.uniform_(-1, 1)
            bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
        out.append(bn)
    return out


def _split(x: torch.Tensor, layout: str) -> list[torch.Tensor]:
    """The pack's input as each member's: (S, N, C) rows, or (N, S*C, H, W) images."""
    return list(x) if layout == "flat" else list(x.chunk(S, 1))


def _join(ys: list[torch.Tensor], layout: str) -> torch.Tensor:
    return torch.stack(ys) if layout == "flat" else torch.cat(ys, 1)


@pytest.mark.parametrize("eps_grad", [None, 1e-2])
@pytest.mark.parametrize("path", ["grouped", "loop"])
@pytest.mark.parametrize("layout", ["flat", "image"])
def test_packed_ghost_bn_is_each_members_ghost_bn(layout, path, eps_grad, monkeypatch):
    monkeypatch.setattr(batch, "LOOP_MIN_VALUES", 0 if path == "loop" else 10**9)
    members = _members(layout, eps_grad)
    packed = PackedBatchNorm(_members(layout, eps_grad))
    for m in [*members, packed]:
        m.ghost_batch = K  # as norm_modes.split_statistics sets it
    shape = (S, N, C) if layout == "flat" else (N, S * C, 4, 3)
    gen = torch.Generator().manual_seed(0)
    for step in range(2):
        x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3 + 1).requires_grad_()
        x_ref = x.detach().clone().requires_grad_()
        y = packed(x)
        y_ref = _join([m(part) for m, part in zip(members, _split(x_ref, layout))], layout)
        torch.testing.assert_close(y, y_ref, **TIGHT, msg=f"output, step {step}")
        g = torch.randn(y.shape, generator=gen, dtype=torch.float64)
        y.backward(g), y_ref.backward(g)
        torch.testing.assert_close(x.grad, x_ref.grad, **TIGHT, msg=f"input gradient, step {step}")
    for name in ("weight", "bias"):
        want = torch.cat([getattr(m, name).grad for m in members])
        torch.testing.assert_close(getattr(packed, name).grad, want, **TIGHT, msg=name)
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(packed, name), torch.cat([getattr(m, name) for m in members]), **TIGHT,
                                   msg=name)
    assert int(packed.num_batches_tracked) == int(members[0].num_batches_tracked) == 2 * GROUPS
