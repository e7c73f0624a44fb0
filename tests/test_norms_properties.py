"""Properties the papers state, checked on every norm and layout where they apply: batch
(in)dependence, train = eval, invariance to weight and input scaling, padding-aware statistics, Switchable
Norm's weights, Batch Renorm's reduction to BN, and the one-line errors for what cannot work."""

import copy

import pytest
import torch

from normbench import norms
from normbench.errors import UserError

SHAPES = {"flat": (8, 16), "image": (6, 16, 5, 5), "seq": (4, 7, 16)}
CASES = [(n, layout) for n in norms.names() for layout in norms.get(n).layouts]


def _call(m, x, mask=None):
    return m(x, mask) if x.dim() == 3 else m(x)


@pytest.mark.parametrize("name,layout", CASES)
def test_batch_independence(name, layout):
    """Reference: each paper: in training, a sample's output changes with the other samples
    exactly when the norm's statistics span the batch (the catalog's `batch_dependent`)."""
    torch.manual_seed(0)
    m = norms.create(name, 16, layout).train()
    x = torch.randn(SHAPES[layout])
    others = x.clone()
    others[1:] = torch.randn_like(others[1:]) * 4 + 2
    twin = copy.deepcopy(m)  # the same state for both batches (PowerNorm's forward reads its running psi)
    same = torch.allclose(_call(m, x)[0], _call(twin, others)[0], atol=1e-6)
    assert same != norms.get(name).batch_dependent


# PowerNorm is batch-independent within a step, but a training step moves its running psi, which eval
# mode then uses: its own test (test_norms_reference) checks train mode without autograd equals eval.
@pytest.mark.parametrize("name,layout", [c for c in CASES if not norms.get(c[0]).batch_dependent and c[0] != "pn"])
def test_batch_independent_norms_train_equals_eval(name, layout):
    """Reference: Ba et al. 2016 (arXiv 1607.06450): LN needs no separate test-time behaviour; nor does any norm whose
    statistics come from the sample itself."""
    torch.manual_seed(0)
    m = norms.create(name, 16, layout)
    x = torch.randn(SHAPES[layout])
    torch.testing.assert_close(_call(m.train(), x), _call(m.eval(), x))


@pytest.mark.parametrize("name", ["bn", "ln", "wn", "cn"])
@pytest.mark.parametrize("layout", ["flat", "image"])
def test_invariant_to_scaling_the_preceding_weights(name, layout):
    """Reference: the weight scale invariance (Ba et al. 2016, sec. 5.1): Norm(W' x) = Norm(W x) for W' = a W (BN, LN; for WN
    scaling the direction v; for CN the cosine ignores the weight's length)."""
    torch.manual_seed(0)
    make = norms.factory(name)
    layer = make.linear(12, 16) if layout == "flat" else make.conv2d(3, 16, 3, padding=1)
    norm = make(16, layout).train()
    x = torch.randn(8, 12) if layout == "flat" else torch.randn(4, 3, 6, 6)
    before = norm(layer(x))
    with torch.no_grad():
        if name == "wn":
            layer.parametrizations.weight.original1.mul_(7.0)
        else:
            layer.weight.mul_(7.0)
            layer.bias.mul_(7.0)
    torch.testing.assert_close(norm(layer(x)), before, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name,layout", [c for c in CASES if c[0] in ("bn", "ln", "in", "gn", "rms", "sn")])
def test_invariant_to_scaling_the_input(name, layout):
    """Reference: the data scale invariance (Ba et al. 2016, sec. 5.1): Norm(a x) = Norm(x) (exactly so with eps -> 0: GN on
    16 flat features has groups of 2 values, whose variance can be near eps)."""
    torch.manual_seed(0)
    m = norms.create(name, 16, layout, eps=1e-12).train()
    x = torch.randn(SHAPES[layout])
    torch.testing.assert_close(_call(m, 5.0 * x), _call(m, x), atol=1e-4, rtol=1e-4)


def _brn_now(name):
    return {"renorm_warmup_frac": 0, "renorm_r_ramp_frac": 0, "renorm_d_ramp_frac": 0} if name == "brn" else {}


@pytest.mark.parametrize("name", ["bn", "brn", "sn"])
def test_masked_statistics_ignore_added_padding(name):
    """Reference: PowerNorm's masked BN (Shen et al. 2020, arXiv 2003.07845: the padding problem): outputs on real tokens do not change
    when more padding is added; the naive layer's (masked=False) do; padding outputs are 0."""
    torch.manual_seed(0)
    x = torch.randn(4, 7, 16) * 2 + 1
    mask = torch.arange(7) < torch.tensor([7, 3, 5, 2])[:, None]
    x_long = torch.cat([x, torch.randn(4, 6, 16) * 10], 1)
    mask_long = torch.cat([mask, torch.zeros(4, 6, dtype=torch.bool)], 1)
    for masked in (True, False):
        short = norms.create(name, 16, "seq", masked=masked, **_brn_now(name))
        long = norms.create(name, 16, "seq", masked=masked, **_brn_now(name))
        long.load_state_dict(short.state_dict())
        y, y_long = short(x, mask), long(x_long, mask_long)
        if masked:
            torch.testing.assert_close(y_long[:, :7][mask], y[mask])
            torch.testing.assert_close(short.running_var, long.running_var)
            assert (y[~mask] == 0).all() and (y_long[~mask_long] == 0).all()
        else:
            assert not torch.allclose(y_long[:, :7][mask], y[mask], atol=1e-3)


@pytest.mark.parametrize("layout,branch,reference", [
    ("image", 0, "in"), ("image", 1, "ln"), ("image", 2, "bn"), ("flat", 0, "ln"), ("flat", 1, "bn"),
    ("seq", 0, "ln"), ("seq", 1, "bn")])
def test_switchable_norm_with_one_branch_is_that_norm(layout, branch, reference):
    """Reference: the catalog's IN, LN and BN: with all weight on one branch, SN computes that norm."""
    torch.manual_seed(0)
    sn = norms.create("sn", 16, layout)
    with torch.no_grad():
        for p in (sn.mean_weight, sn.var_weight):
            p.zero_()[branch] = 40.0
    ref = norms.create(reference, 16, layout)
    mask = torch.arange(7) < torch.tensor([7, 3, 5, 2])[:, None] if layout == "seq" else None
    real = mask if layout == "seq" else slice(None)  # ln has no padding outputs to zero
    for _ in range(2):
        x = torch.randn(SHAPES[layout]) * 3 + 1
        torch.testing.assert_close(_call(sn, x, mask)[real], _call(ref, x, mask)[real], atol=1e-4, rtol=1e-4)
    sn.eval(), ref.eval()
    torch.testing.assert_close(_call(sn, x, mask)[real], _call(ref, x, mask)[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["bn", "brn", "sn"])
def test_one_value_per_channel_in_training_is_a_user_error(name):
    """Reference: the definition: a batch of one flat sample has no batch variance. Eval (running
    statistics) still works."""
    m = norms.create(name, 8, "flat")
    with pytest.raises(UserError, match="one value per channel.*batch_size >= 2"):
        m(torch.randn(1, 8))
    m.eval()
    assert m(torch.randn(1, 8)).shape == (1, 8)


def test_impossible_combinations_fail_at_build_with_why_and_what_instead():
    """Reference: docs/design.md: building fails at once with a message saying why and what to use instead."""
    with pytest.raises(UserError, match="one value per channel.*use ln or bn"):
        norms.create("in", 8, "flat")
    with pytest.raises(UserError, match="groups=3 does not divide 8.*1, 2, 4, 8"):
        norms.create("gn", 8, "image", groups=3)
    with pytest.raises(UserError, match="one value in each group"):
        norms.create("gn", 8, "flat", groups=8)
    with pytest.raises(UserError, match="EvoNorm-S0 groups=3"):
        norms.create("evonorm", 8, "image", groups=3)
    # more groups than channels: refused, naming the channel count and a valid value, never clipped (the
    # run's recorded norm.groups must be what was built)
    with pytest.raises(UserError, match="GroupNorm groups=8 is more than this layer's 4 channels.*at most 4"):
        norms.create("gn", 4, "image", groups=8)
    with pytest.raises(UserError, match="groups=8 is more than this layer's 4 channels.*at most 2; valid here: 1, 2"):
        norms.create("gn", 4, "flat", groups=8)
    with pytest.raises(UserError, match="EvoNorm-S0 groups=16 is more than this layer's 8 channels.*at most 8"):
        norms.create("evonorm", 8, "image", groups=16)
    with pytest.raises(UserError, match="is 1 x 1"):
        norms.create("in", 8, "image")(torch.randn(2, 8, 1, 1))
    with pytest.raises(UserError, match="takes no option groups"):
        norms.create("bn", 8, "flat", groups=2)
