"""BatchNorm with statistics over k random spatial positions per image (`norm.positions=k`): the values-per-
channel experiment. Reference: torch's BatchNorm2d, applied to the positions the layer drew (for the
statistics, the running averages and the gradients), and to the whole image when k covers every position."""

import pytest
import torch
from torch import nn

from normbench import models, norms
from normbench.config import ModelConfig
from normbench.errors import UserError

N, C, H, W = 6, 4, 5, 3


def _x(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N, C, H, W, generator=g, dtype=torch.float64) * 2 + 1).requires_grad_()


def _drawn(bn, step):
    """The positions batch `step` of `bn` draws (the layer's documented rule: seed + batch count)."""
    gen = torch.Generator().manual_seed(bn.position_seed + step)
    return torch.rand(N, H * W, generator=gen).argsort(1)[:, :bn.positions]


def test_positions_covering_the_image_is_torch_batchnorm():
    bn, ref = norms.create("bn", C, "image", positions=H * W).double(), nn.BatchNorm2d(C).double()
    for seed in range(3):
        x = _x(seed)
        torch.testing.assert_close(bn(x), ref(x), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bn.running_mean, ref.running_mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bn.running_var, ref.running_var, rtol=1e-12, atol=1e-12)


def test_statistics_come_from_the_drawn_positions_only():
    k = 2
    bn, ref = norms.create("bn", C, "image", positions=k).double(), nn.BatchNorm2d(C).double()
    for step in range(3):
        x = _x(step)
        y = bn(x)
        idx = _drawn(bn, step)
        sub = x.flatten(2).gather(2, idx[:, None, :].expand(N, C, k))[..., None]  # (N, C, k, 1)
        ref(sub)  # torch's BN on the drawn positions: its running averages are the reference
        mean, var = sub.mean((0, 2, 3)), sub.var((0, 2, 3), unbiased=False)
        want = (x - mean[:, None, None]) / torch.sqrt(var[:, None, None] + bn.eps)
        torch.testing.assert_close(y, want, rtol=1e-12, atol=1e-12)
        gy = torch.randn_like(y)
        got = torch.autograd.grad(y, x, gy)[0]
        torch.testing.assert_close(got, torch.autograd.grad(want, x, gy)[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(bn.running_mean, ref.running_mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bn.running_var, ref.running_var, rtol=1e-12, atol=1e-12)
    assert len({tuple(r) for r in _drawn(bn, 0).tolist()}) > 1  # each image draws its own positions


def test_eval_uses_running_statistics_as_batchnorm():
    bn, ref = norms.create("bn", C, "image", positions=3).double(), nn.BatchNorm2d(C).double()
    bn(_x())
    ref.load_state_dict(bn.state_dict())
    bn.eval(), ref.eval()
    torch.testing.assert_close(bn(_x(1)), ref(_x(1)))


def test_values_per_channel_is_batch_times_positions():
    torch.manual_seed(0)
    model = models.create(ModelConfig(name="cnn", channels=[4, 8], hidden=16),
                          norms.factory("bn", positions=5), (1, 28, 28), 10)
    assert models.norm_values_per_channel(model, torch.randn(4, 1, 28, 28))[0] == 4 * 5


@pytest.mark.parametrize("layout,opts,why", [
    ("flat", {"positions": 2}, "flat features do not have"),
    ("image", {"positions": 0}, "positions >= 1"),
    ("image", {"positions": 2, "ghost_batch": 2}, "neither norm.ghost_batch"),
])
def test_impossible_positions_are_one_line_errors(layout, opts, why):
    with pytest.raises(UserError, match=why):
        norms.create("bn", C, layout, **opts)


def test_positions_on_another_norm_is_refused():
    with pytest.raises(UserError, match="takes no option positions"):
        norms.create("ln", C, "image", positions=2)


def test_positions_leave_the_models_initialization_as_plain_bn():
    """Reference: the plain-BN CNN at the same seed. The position seed is drawn without advancing torch's
    generator, so every weight initialized after a positions layer is plain BN's (the runs pair), and the
    model's two positions layers draw different positions, the same ones at every build of that seed."""
    def build(**opts):
        torch.manual_seed(3)
        return models.create(ModelConfig(name="cnn", channels=[4, 8], hidden=16), norms.factory("bn", **opts),
                             (1, 28, 28), 10)

    plain, sampled = build(), build(positions=4)
    want, have = plain.state_dict(), sampled.state_dict()
    assert have.keys() == want.keys() and any("net.4." in k for k in want)  # weights after the first BN too
    for key in want:
        assert torch.equal(have[key], want[key]), key
    seeds = [m.position_seed for m in sampled.modules() if getattr(m, "positions", None) is not None]
    assert len(seeds) == 2 and seeds[0] != seeds[1]
    assert seeds == [m.position_seed for m in build(positions=4).modules() if getattr(m, "positions", None)]
    first, second = [m for m in sampled.modules() if getattr(m, "positions", None) is not None]
    assert not torch.equal(_drawn(first, 0), _drawn(second, 0))
