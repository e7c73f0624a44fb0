"""Ghost batches (Hoffer et al. 2017, arXiv 1705.08741): a batch-statistics norm with ghost_batch=K computes
what K-sample calls of the norm, one group after another, would: outputs, gradients, running statistics."""

import pytest
import torch
from torch import nn

from normbench import norms
from normbench.errors import UserError
from normbench.norms import batch, batch_stats

K, GROUPS, C, T = 3, 4, 5, 6
N = K * GROUPS
TIGHT = {"rtol": 1e-10, "atol": 1e-10}
SHAPES = {"flat": (N, C), "image": (N, C, 4, 3), "seq": (N, T, C)}
# seq lengths: every group of 3 keeps >= 2 real tokens (the rule for fewer is tested on its own below)
LENGTHS = torch.tensor([6, 1, 3, 2, 2, 5, 6, 6, 6, 1, 1, 4])


def _mask(layout):
    return torch.arange(T) < LENGTHS[:, None] if layout == "seq" else None


def _torch_bn(layout, momentum=0.1):
    """torch's own layer: BatchNorm2d on images, BatchNorm1d on (N, C) rows (a seq group's real tokens)."""
    return (nn.BatchNorm2d if layout == "image" else nn.BatchNorm1d)(C, momentum=momentum).double()


def _torch_bn_group(ref, x, mask):
    """One group through torch's BatchNorm: seq statistics over its real tokens, padding outputs 0."""
    if mask is None:
        return ref(x)
    rows = ref(x[mask])
    return torch.zeros_like(x).index_put((mask,), rows)


def _data(layout, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(SHAPES[layout], generator=g, dtype=torch.float64) * 3 + 1).requires_grad_()


def _compare(module, reference, params_ref, buffers, layout, steps=3):
    """module (ghost) vs reference(x_group, mask_group) in turn: outputs, input grads, parameter grads."""
    mask = _mask(layout)
    for step in range(steps):
        x = _data(layout, step)
        x_ref = x.detach().clone().requires_grad_()
        y = module(x, mask) if layout == "seq" else module(x)
        masks = [None] * GROUPS if mask is None else mask.split(K)
        y_ref = torch.cat([reference(xg, mg) for xg, mg in zip(x_ref.split(K), masks)])
        torch.testing.assert_close(y, y_ref, **TIGHT)
        g = torch.randn_like(y)
        y.backward(g), y_ref.backward(g)
        torch.testing.assert_close(x.grad, x_ref.grad, **TIGHT)
        for (name, p), p_ref in zip(module.named_parameters(), params_ref):
            torch.testing.assert_close(p.grad, p_ref.grad, **TIGHT, msg=name)
        for name in buffers:
            torch.testing.assert_close(getattr(module, name), buffers[name](), **TIGHT, msg=name)
        module.zero_grad()
        for p in params_ref:
            p.grad = None


@pytest.mark.parametrize("impl", ["grouped", "loop", "scratch"])
@pytest.mark.parametrize("layout", ["flat", "image", "seq", "seq_unmasked"])
def test_ghost_bn_is_torch_batchnorm_on_each_group_in_turn(layout, impl, monkeypatch):
    """Reference: torch.nn.BatchNorm1d/2d called on each group of K samples in sequence (on seq, on each
    group's real tokens): outputs, gradients, running statistics and the count of updates, in float64;
    then eval with the running statistics. Native BN's two paths (one kernel call over the groups folded
    into channels; one call per group) and the from-scratch twin."""
    torch.manual_seed(0)
    monkeypatch.setattr(batch, "LOOP_MIN_VALUES", 0 if impl == "loop" else 10**9)
    unmasked = layout == "seq_unmasked"
    layout = "seq" if unmasked else layout
    impl = "scratch" if impl == "scratch" else "native"
    bn = norms.create("bn", C, layout, ghost_batch=K, impl=impl).double()
    ref = _torch_bn(layout)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2), bn.bias.uniform_(-1, 1)
        ref.weight.copy_(bn.weight), ref.bias.copy_(bn.bias)
    buffers = {"running_mean": lambda: ref.running_mean, "running_var": lambda: ref.running_var,
               "num_batches_tracked": lambda: ref.num_batches_tracked}
    if unmasked:  # statistics over every token of each group: torch's BN on the group's (K T, C) rows
        bn.masked = False
        reference = lambda x, m: ref(x.reshape(-1, C)).view(x.shape)
    else:
        reference = lambda x, m: _torch_bn_group(ref, x, m)
    _compare(bn, reference, [ref.weight, ref.bias], buffers, layout)
    bn.eval(), ref.eval()
    x, mask = _data(layout, 9).detach(), (None if unmasked else _mask(layout))
    expected = ref(x.reshape(-1, C)).view(x.shape) if unmasked else _torch_bn_group(ref, x, mask)
    torch.testing.assert_close(bn(x, mask) if layout == "seq" else bn(x), expected, **TIGHT)


@pytest.mark.parametrize("name", ["brn", "sn"])
@pytest.mark.parametrize("layout", ["flat", "image", "seq"])
def test_ghost_brn_and_sn_are_the_norm_on_each_group_in_turn(name, layout):
    """Reference: the same norm without ghost batches (checked against its paper in test_norms_reference.py)
    called on each group of K samples in sequence: outputs, gradients, running statistics, float64. Batch
    Renorm's r and d for each group use the running statistics left by the groups before it."""
    torch.manual_seed(0)
    opts = {"r_max": 1.5, "d_max": 0.5, "renorm_warmup_frac": 0.0, "renorm_r_ramp_frac": 0.0,
            "renorm_d_ramp_frac": 0.0} if name == "brn" else {}
    module = norms.create(name, C, layout, ghost_batch=K, **opts).double()
    ref = norms.create(name, C, layout, **opts).double()
    with torch.no_grad():
        module.weight.uniform_(0.5, 2), module.bias.uniform_(-1, 1)
        if name == "sn":
            module.mean_weight.uniform_(-1, 1), module.var_weight.uniform_(-1, 1)
    ref.load_state_dict(module.state_dict())
    buffers = {"running_mean": lambda: ref.running_mean, "running_var": lambda: ref.running_var}
    call = (lambda x, m: ref(x, m)) if layout == "seq" else (lambda x, m: ref(x))
    _compare(module, call, list(ref.parameters()), buffers, layout)
    if name == "brn":  # running statistics count groups; the schedule's clock counts training steps
        assert module.num_batches_tracked.item() == 3 * GROUPS and module.step.item() == 3


def test_a_group_with_one_real_token_leaves_the_running_statistics_alone():
    """Reference: the masked-BN rule (common.py) applied per group: a ghost batch with fewer than two real
    tokens has no variance, so the running statistics take only the other groups, in order (torch's
    BatchNorm1d on each of those groups' real rows)."""
    torch.manual_seed(0)
    bn = norms.create("bn", C, "seq", ghost_batch=2).double()
    ref = _torch_bn("seq")
    x = torch.randn(6, 1, C, dtype=torch.float64) * 2 + 1  # a recurrent step: (N, 1, C)
    mask = torch.tensor([[True], [True], [True], [False], [True], [True]])
    y = bn(x, mask)
    for g in (0, 2):
        ref(x[2 * g:2 * g + 2, 0])
    torch.testing.assert_close(bn.running_mean, ref.running_mean, **TIGHT)
    torch.testing.assert_close(bn.running_var, ref.running_var, **TIGHT)
    assert (y[3] == 0).all()


def test_closed_form_equals_sequential_updates():
    """Reference: G running-average updates r <- (1 - m_g) r + m_g s_g done one by one, with some groups
    skipped (m_g = 0), against batch_stats.py's closed forms for the final value and the value before each group."""
    g = torch.Generator().manual_seed(0)
    stats = torch.randn(7, 3, generator=g, dtype=torch.float64)
    m = torch.tensor([0.1, 0.1, 0.0, 0.1, 0.3, 0.0, 0.1], dtype=torch.float64)
    r = torch.randn(3, generator=g, dtype=torch.float64)
    seen = []
    value = r.clone()
    for s, mg in zip(stats, m):
        seen.append(value.clone())
        value = (1 - mg) * value + mg * s
    keep, w = batch_stats.final_weights(m)
    torch.testing.assert_close(keep * r + w @ stats, value, **TIGHT)
    torch.testing.assert_close(batch_stats.running_before(r, stats, m), torch.stack(seen), **TIGHT)


def test_ghost_batch_errors_are_one_line():
    """Reference: the issue's contract: a batch-independent norm refuses ghost_batch at build time; at forward
    time a K that does not divide the batch is named with the batch; null is the whole batch, so ln with
    ghost_batch=null is torch's own nn.LayerNorm, compared by class and against torch.nn.functional.layer_norm's
    output on the same rows."""
    with pytest.raises(UserError, match="ln is batch-independent.*bn, sn, brn"):
        norms.create("ln", 8, "flat", ghost_batch=2)
    with pytest.raises(UserError, match="ghost_batch must be a number of samples >= 1"):
        norms.create("bn", 8, "flat", ghost_batch=0)
    with pytest.raises(UserError, match="ghost_batch=3 does not divide this batch of 8 samples"):
        norms.create("bn", 8, "flat", ghost_batch=3)(torch.randn(8, 8))
    with pytest.raises(UserError, match="ghost_batch=1 .* 1 value per channel"):
        norms.create("bn", 8, "flat", ghost_batch=1)(torch.randn(8, 8))
    ln = norms.create("ln", 8, "flat", ghost_batch=None).double()
    assert type(ln) is nn.LayerNorm
    x = torch.randn(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ln(x), nn.functional.layer_norm(x, (8,)), **TIGHT)
    bn = norms.create("bn", 8, "flat", ghost_batch=3).eval()  # eval: running statistics, any batch
    assert bn(torch.randn(8, 8)).shape == (8, 8)
