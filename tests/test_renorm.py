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
def test_batch_renorm_with_rmax_1_dmax_0_is_batchnorm(layout, ghost_batch):
    """Reference: Ioffe 2017, section 3: with r_max = 1 and d_max = 0, r = 1 and d = 0, so Batch Renorm at
    its default momentum is BN at its default: outputs, gradients and running statistics over several
    steps, then eval, in float64 (with and without ghost batches)."""
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
    torch.testing.assert_close(brn.running_var, bn.running_var, **tight)
    brn.eval(), bn.eval()
    x = torch.randn(SHAPES[layout], dtype=torch.float64)
    torch.testing.assert_close(_call(brn, x, mask), _call(bn, x, mask), **tight)
