"""Batch Renorm as published (Ioffe 2017, arXiv 1702.03275): its schedule in fractions of the run, its
momentum, and its reduction to BatchNorm."""

import warnings

import pytest
import torch

from normbench import norms
from normbench.errors import UserError

SHAPES = {"flat": (8, 16), "image": (4, 16, 5, 5), "seq": (4, 7, 16)}
# The paper, section 4.1: 130k steps; BN until 5k, r_max = 3 reached at 40k, d_max = 5 reached at 25k.
PAPER = {"total": 130_000, "plain": 5_000, "r_at": 40_000, "d_at": 25_000}


def _call(m, x, mask):
    return m(x, mask) if mask is not None else m(x)


def _at(total, fraction):
    return round(fraction * total)


def _limits(brn, step):
    r, d = brn.limits(step)
    return r.item(), d.item()


def test_default_schedule_has_the_papers_shape_at_any_length():
    """Reference: the paper's schedule scaled to the run: plain BN for the first 4% (5k/130k = 3.8%),
    r_max reaching 3 at 31% (40k/130k = 30.8%) and d_max reaching 5 at 19% (25k/130k = 19.2%), linear in
    between; checked at those fractions for two run lengths."""
    for total in (1_000, PAPER["total"]):
        brn = norms.create("brn", 4, "flat")
        brn.set_total_steps(total)
        assert _limits(brn, 0) == (1, 0) and _limits(brn, _at(total, 0.04)) == pytest.approx((1, 0), abs=1e-5)
        assert _limits(brn, _at(total, 0.31)) == pytest.approx((3, 5), abs=1e-4)
        assert _limits(brn, _at(total, 0.19)) == pytest.approx((1 + 2 * 0.15 / 0.27, 5), abs=1e-4)
        assert _limits(brn, _at(total, 0.175)) == pytest.approx((1 + 2 * 0.135 / 0.27, 5 * 0.135 / 0.15), abs=1e-3)
        assert _limits(brn, total) == (3, 5)
    # within 1% of the run of the paper's own milestones, at its own length
    brn = norms.create("brn", 4, "flat")
    brn.set_total_steps(PAPER["total"])
    assert _limits(brn, PAPER["plain"] - 1) == (1, 0)
    assert _limits(brn, PAPER["r_at"] + 1300)[0] == 3 and _limits(brn, PAPER["r_at"] - 1300)[0] < 3
    assert _limits(brn, PAPER["d_at"] + 1300)[1] == 5 and _limits(brn, PAPER["d_at"] - 1300)[1] < 5


def test_schedule_follows_the_step_buffer_through_a_checkpoint():
    """Reference: the definition of the schedule at explicit fractions (warmup 0.1, ramps 0.2 and 0.4 of a
    100-step run); the clock is the `step` buffer, so a loaded state dict moves it."""
    brn = norms.create("brn", 4, "flat", r_max=3.0, d_max=5.0, renorm_warmup_frac=0.1, renorm_r_ramp_frac=0.2,
                       renorm_d_ramp_frac=0.4)
    brn.set_total_steps(100)
    for step, (r, d) in {0: (1, 0), 10: (1, 0), 20: (2, 1.25), 30: (3, 2.5), 50: (3, 5), 100: (3, 5)}.items():
        assert _limits(brn, step) == pytest.approx((r, d)), step
    for _ in range(3):
        brn(torch.randn(6, 4))
    assert brn.step.item() == 3 and brn.step.dtype == torch.long
    state = brn.state_dict()
    state["step"] = torch.tensor(30)  # as a checkpoint from step 30 would hold
    fresh = norms.create("brn", 4, "flat", r_max=3.0, d_max=5.0, renorm_warmup_frac=0.1,
                         renorm_r_ramp_frac=0.2, renorm_d_ramp_frac=0.4)
    fresh.set_total_steps(100)
    fresh.load_state_dict(state)
    assert _limits(fresh, fresh.step) == pytest.approx((3, 2.5))


def test_without_the_runs_length_the_bounds_are_final_with_a_warning():
    """Reference: the module's contract (renorm.py): fractions need the run's length; without it the bounds
    are the final ones, with a warning (none for a flat schedule). norms.set_total_steps reaches every
    Batch Renorm layer of a model."""
    brn = norms.create("brn", 4, "flat")
    with pytest.warns(UserWarning, match="not told the run's length"):
        assert _limits(brn, 0) == (3, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        norms.create("brn", 4, "flat", r_max=1.0, d_max=0.0)(torch.randn(6, 4))
        model = torch.nn.Sequential(norms.create("brn", 4, "flat"), torch.nn.ReLU(), norms.create("brn", 4, "flat"))
        assert norms.set_total_steps(model, 50) == 2
        assert model(torch.randn(6, 4)).shape == (6, 4)
        assert _limits(model[0], 0) == (1, 0)
    with pytest.raises(UserError, match=">= 1 steps"):
        brn.set_total_steps(0)


def test_momentum_is_batchnorms():
    """Reference: BatchNorm's default momentum (0.1, torch's and the bn config's)."""
    assert norms.create("brn", 4, "flat").momentum == norms.create("bn", 4, "flat").momentum == 0.1


@pytest.mark.parametrize("ghost_batch", [None, 2])
@pytest.mark.parametrize("layout", ["flat", "image", "seq"])
def test_batch_renorm_with_rmax_1_dmax_0_trains_as_batchnorm(layout, ghost_batch):
    """Reference: Ioffe 2017, section 3: with r_max = 1 and d_max = 0, r = 1 and d = 0, so Batch Renorm's
    training output and gradients are BN's, and its running mean is BN's (both average mu_B at the same
    momentum), over several steps in float64 (with and without ghost batches). Its running sigma is
    Algorithm 1's moving average of sigma_B, not BN's of the variance: test_algorithm_1_by_hand checks it."""
    torch.manual_seed(0)
    brn = norms.create("brn", 16, layout, r_max=1.0, d_max=0.0, ghost_batch=ghost_batch).double()
    bn = norms.create("bn", 16, layout, ghost_batch=ghost_batch).double()
    mask = torch.arange(7) < torch.tensor([7, 3, 5, 2])[:, None] if layout == "seq" else None
    tight = {"rtol": 1e-10, "atol": 1e-10}
    for _ in range(4):
        x = (torch.randn(SHAPES[layout], dtype=torch.float64) * 3 + 1).requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        y1, y2 = _call(brn, x, mask), _call(bn, x2, mask)
        torch.testing.assert_close(y1, y2, **tight)
        g = torch.randn_like(y1)
        y1.backward(g), y2.backward(g)
        torch.testing.assert_close(x.grad, x2.grad, **tight)
        torch.testing.assert_close(brn.weight.grad, bn.weight.grad, **tight)
        torch.testing.assert_close(brn.bias.grad, bn.bias.grad, **tight)
    torch.testing.assert_close(brn.running_mean, bn.running_mean, **tight)
    assert not torch.allclose(brn.running_var, bn.running_var)  # sigma_B's average, not the variance's


def _algorithm_1(x, groups, state, r_max, d_max, eps, momentum, gamma, beta):
    """Ioffe 2017, Algorithm 1, written out per group in turn for (N, C) or (N, C, H, W) in float64: the
    reference for the layer. `state` holds mu and sigma and is updated in place; r and d are detached."""
    outs = []
    dims = [0] + list(range(2, x.dim()))
    shape = [1, -1] + [1] * (x.dim() - 2)
    for xg in x.chunk(groups):
        mu_b = xg.mean(dims)
        sigma_b = torch.sqrt(((xg - mu_b.view(shape)) ** 2).mean(dims) + eps)  # biased, eps inside
        r = (sigma_b / state["sigma"]).clamp(1 / r_max, r_max).detach()
        d = ((mu_b - state["mu"]) / state["sigma"]).clamp(-d_max, d_max).detach()
        x_hat = (xg - mu_b.view(shape)) / sigma_b.view(shape) * r.view(shape) + d.view(shape)
        outs.append(gamma.view(shape) * x_hat + beta.view(shape))
        state["mu"] = state["mu"] + momentum * (mu_b.detach() - state["mu"])
        state["sigma"] = state["sigma"] + momentum * (sigma_b.detach() - state["sigma"])
    return torch.cat(outs)


@pytest.mark.parametrize("ghost_batch", [None, 2, 4])
@pytest.mark.parametrize("layout", ["flat", "image"])
def test_algorithm_1_by_hand(layout, ghost_batch):
    """Reference: Algorithm 1 of Ioffe 2017 computed by hand in float64 (_algorithm_1: per group in turn,
    sigma_B the biased standard deviation with eps, r and d clipped and not differentiated, moving averages
    of mu_B and sigma_B): outputs, input and parameter gradients, and mu and sigma over five batches with
    the bounds active (r_max 1.5, d_max 0.5 from the first step), then inference y = gamma (x - mu) / sigma
    + beta."""
    torch.manual_seed(1)
    shape = {"flat": (8, 6), "image": (8, 6, 3, 3)}[layout]
    eps, momentum, r_max, d_max = 1e-3, 0.1, 1.5, 0.5
    brn = norms.create("brn", 6, layout, eps=eps, momentum=momentum, r_max=r_max, d_max=d_max,
                       ghost_batch=ghost_batch, renorm_warmup_frac=0.0, renorm_r_ramp_frac=0.0,
                       renorm_d_ramp_frac=0.0).double()
    with torch.no_grad():
        brn.weight.copy_(torch.rand(6, dtype=torch.float64) + 0.5)
        brn.bias.copy_(torch.randn(6, dtype=torch.float64))
    gamma, beta = brn.weight.detach().clone().requires_grad_(), brn.bias.detach().clone().requires_grad_()
    state = {"mu": torch.zeros(6, dtype=torch.float64), "sigma": torch.sqrt(torch.ones(6, dtype=torch.float64) + eps)}
    groups = shape[0] // (ghost_batch or shape[0])
    clipped = 0
    for step in range(5):
        x = (torch.randn(shape, dtype=torch.float64) * (2 + step) + step).requires_grad_()
        x2 = x.detach().clone().requires_grad_()
        before = {k: v.clone() for k, v in state.items()}
        want = _algorithm_1(x2, groups, state, r_max, d_max, eps, momentum, gamma, beta)
        got = brn(x)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
        g = torch.randn_like(got)
        got.backward(g), want.backward(g)
        torch.testing.assert_close(x.grad, x2.grad, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(brn.weight.grad, gamma.grad, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(brn.bias.grad, beta.grad, rtol=1e-9, atol=1e-10)
        brn.weight.grad = brn.bias.grad = gamma.grad = beta.grad = None
        torch.testing.assert_close(brn.running_mean, state["mu"], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(torch.sqrt(brn.running_var + eps), state["sigma"], rtol=1e-10, atol=1e-12)
        dims = [0] + list(range(2, x.dim()))
        sigma_b = torch.sqrt(x.detach().chunk(groups)[0].var(dims, unbiased=False) + eps)
        clipped += int(((sigma_b / before["sigma"]) > r_max).any() | ((sigma_b / before["sigma"]) < 1 / r_max).any())
    assert clipped >= 1  # the bounds were reached: the clipping is part of what was compared
    brn.eval()
    x = torch.randn(shape, dtype=torch.float64)
    view = [1, -1] + [1] * (x.dim() - 2)
    want = gamma.view(view) * (x - state["mu"].view(view)) / state["sigma"].view(view) + beta.view(view)
    torch.testing.assert_close(brn(x), want.detach(), rtol=1e-10, atol=1e-10)
