"""BatchNorm's `eps_grad` (issue 42, item 3): the output of BN at `eps`, the gradient of BN at `eps_grad`, with
batch statistics over the same groups. torch.autograd.gradcheck does not apply (the layer is on purpose not
the derivative of its own forward), so the gradient is checked against BN at eps_grad written out here from
the definition, by autograd and by central finite differences, in float64."""

from __future__ import annotations

import pytest
import torch

from normbench import norms
from normbench.errors import UserError
from normbench.norms import batch_stats
from normbench.pack.layers import PackedBatchNorm, convert, unpack_into

C, N = 3, 16
TIGHT = {"rtol": 1e-10, "atol": 1e-10}
# (forward eps, gradient eps): both arms of the study, eps 0.1's forward alone and its gradient alone
SPLITS = [(0.1, 1e-5), (1e-5, 0.1)]
GHOSTS = [2, 8, None]  # None: the whole batch


def _data(shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + 0.5).requires_grad_()


def _bn(eps, eps_grad=..., ghost=None, layout="flat", impl="native", seed=0, **opts):
    """A float64 BN with a scale and shift away from 1 and 0 (so their gradients tell eps apart)."""
    opts = {"ghost_batch": ghost, **opts, **({} if eps_grad is ... else {"eps_grad": eps_grad})}
    torch.manual_seed(seed)
    bn = norms.create("bn", C, layout, eps=eps, impl=impl, **opts).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([1.5, -0.7, 0.3], dtype=torch.float64))
        bn.bias.copy_(torch.tensor([0.2, -0.1, 0.4], dtype=torch.float64))
    return bn


def reference(x, weight, bias, eps, ghost):
    """BN on (N, C) from Ioffe & Szegedy's Algorithm 1, each group of `ghost` consecutive samples on its own
    (Hoffer et al.): mean and biased variance per channel, (x - mean) / sqrt(var + eps) * weight + bias."""
    outs = []
    for xg in x.split(ghost or x.shape[0]):
        mean = xg.mean(0)
        var = ((xg - mean) ** 2).mean(0)
        outs.append((xg - mean) / torch.sqrt(var + eps) * weight + bias)
    return torch.cat(outs)


def _grads(module_or_fn, x, g, params):
    x = x.detach().clone().requires_grad_()
    y = module_or_fn(x)
    grads = torch.autograd.grad(y, [x, *params], g)
    return y.detach(), grads


@pytest.mark.parametrize("eps,eps_grad", SPLITS)
@pytest.mark.parametrize("ghost", GHOSTS)
@pytest.mark.parametrize("impl", ["native", "scratch"])
def test_forward_is_bn_at_eps_bit_for_bit_running_statistics_and_eval_too(eps, eps_grad, ghost, impl):
    """Compared against: BN at `eps` without the option (the same builder): the training output, the running
    statistics and the batch count after two steps, and the eval output, all bit for bit."""
    split, plain = _bn(eps, eps_grad, ghost, impl=impl), _bn(eps, ghost=ghost, impl=impl)
    for step in range(2):
        x = _data((N, C), step, scale=2.0)
        assert torch.equal(split(x), plain(x))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert torch.equal(getattr(split, name), getattr(plain, name)), name
    x = _data((N, C), 5)
    assert torch.equal(split.eval()(x), plain.eval()(x))


@pytest.mark.parametrize("eps,eps_grad", SPLITS)
@pytest.mark.parametrize("ghost", GHOSTS)
@pytest.mark.parametrize("impl", ["native", "scratch"])
def test_gradient_is_autograds_gradient_of_bn_at_eps_grad(eps, eps_grad, ghost, impl):
    """Compared against: autograd through `reference` (BN written out, per ghost batch) at eps_grad, at the
    same input and upstream gradient: d/dx, d/dweight, d/dbias at 1e-10. And not BN at eps's own gradient
    (the option changes something)."""
    bn = _bn(eps, eps_grad, ghost, impl=impl)
    x, g = _data((N, C), 1), _data((N, C), 2).detach()
    params = [bn.weight, bn.bias]
    _, got = _grads(bn, x, g, params)
    w, b = (p.detach().clone().requires_grad_() for p in params)
    _, want = _grads(lambda t: reference(t, w, b, eps_grad, ghost), x, g, [w, b])
    for name, have, expect in zip(("x", "weight", "bias"), got, want):
        torch.testing.assert_close(have, expect, **TIGHT, msg=name)
    _, own = _grads(lambda t: reference(t, w, b, eps, ghost), x, g, [w, b])
    assert not torch.allclose(got[0], own[0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("eps,eps_grad", SPLITS)
@pytest.mark.parametrize("ghost", [2, None])
def test_gradient_matches_central_finite_differences_of_bn_at_eps_grad(eps, eps_grad, ghost):
    """Compared against: central differences (h = 1e-5) of sum(g * BN at eps_grad (x)), `reference` in
    float64, for every input, scale and shift entry (atol 1e-9: at K = 2 and eps_grad 1e-5 the input
    gradient is ~eps_grad / |delta|^3, ~1e-5)."""
    n, h = 8, 1e-5
    bn = _bn(eps, eps_grad, ghost)
    x, g = _data((n, C), 3), _data((n, C), 4).detach()
    got = _grads(bn, x, g, [bn.weight, bn.bias])[1]
    w, b = bn.weight.detach().clone(), bn.bias.detach().clone()

    def loss(xv, wv, bv):
        return float((g * reference(xv, wv, bv, eps_grad, ghost)).sum())

    args = [x.detach().clone(), w, b]
    for which, have in enumerate(got):
        fd = torch.zeros_like(args[which])
        flat = fd.view(-1)
        for i in range(flat.numel()):
            plus, minus = [a.clone() for a in args], [a.clone() for a in args]
            plus[which].view(-1)[i] += h
            minus[which].view(-1)[i] -= h
            flat[i] = (loss(*plus) - loss(*minus)) / (2 * h)
        torch.testing.assert_close(have, fd, rtol=1e-6, atol=1e-9, msg=("x", "weight", "bias")[which])


CASES = {  # every training path of the native layer: (layout, shape, options)
    "flat": ("flat", (N, C), {}),
    "flat-ghost2": ("flat", (N, C), {"ghost_batch": 2}),
    "image-ghost2-one-call": ("image", (N, C, 3, 3), {"ghost_batch": 2}),  # 18 values per group: to_groups
    "image-ghost2-loop": ("image", (N, C, 4, 4), {"ghost_batch": 2}),  # 32 values: one kernel call per group
    "image-positions": ("image", (N, C, 4, 4), {"positions": 3}),
    "seq-masked": ("seq", (N, 5, C), {}),  # the CPU gathers the real tokens
    "seq-masked-ghost4": ("seq", (N, 5, C), {"ghost_batch": 4}),  # weighted statistics per group
}


def _run(bn, layout, shape, seed):
    x = _data(shape, seed)
    mask = (torch.arange(shape[1]) < torch.arange(N)[:, None] % 4 + 2) if layout == "seq" else None
    y = bn(x, mask) if layout == "seq" else bn(x)
    g = _data(shape, seed + 10).detach()
    return (y.detach(), *torch.autograd.grad(y, [x, bn.weight, bn.bias], g))


@pytest.mark.parametrize("case", list(CASES))
def test_eps_grad_null_or_eps_is_todays_layer_bit_for_bit(case, monkeypatch):
    """Compared against: the layer built without the option (today's BN): eps_grad=None and eps_grad=eps give
    the same output, input and parameter gradients and running statistics bit for bit, on every training
    path, without taking split_eps's path at all; and eps_grad=0.1 does take it (and moves the gradient)."""
    layout, shape, opts = CASES[case]
    made = {key: _bn(1e-5, eps_grad, layout=layout, **opts) for key, eps_grad in
            (("today", ...), ("null", None), ("eps", 1e-5), ("split", 0.1))}
    today = [_run(made["today"], layout, shape, s) for s in range(2)]
    calls = []
    monkeypatch.setattr(batch_stats, "split_eps", lambda v, g: calls.append(1) or v.detach() + (g - g.detach()))
    for key in ("null", "eps"):
        for seed, want in enumerate(today):
            for have, expect in zip(_run(made[key], layout, shape, seed), want):
                assert torch.equal(have, expect), key
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            assert torch.equal(getattr(made[key], name), getattr(made["today"], name)), (key, name)
    assert calls == []
    split = _run(made["split"], layout, shape, 0)
    assert calls and torch.equal(split[0], today[0][0]) and not torch.equal(split[1], today[0][1])


@pytest.mark.parametrize("case", ["image-ghost2-loop", "image-positions", "seq-masked-ghost4"])
def test_other_paths_take_the_gradient_of_bn_at_eps_grad(case):
    """Compared against: BN built at eps = eps_grad (same seed, so the same random positions), on the paths
    `reference` does not cover: its input and parameter gradients at 1e-10."""
    layout, shape, opts = CASES[case]
    split, want = _bn(0.1, 1e-5, layout=layout, **opts), _bn(1e-5, layout=layout, **opts)
    for have, expect in zip(_run(split, layout, shape, 0)[1:], _run(want, layout, shape, 0)[1:]):
        torch.testing.assert_close(have, expect, **TIGHT)


@pytest.mark.parametrize("layout,shape", [("flat", (N, C)), ("image", (N, C, 3, 3))])
def test_packed_bn_with_eps_grad_equals_its_members(layout, shape):
    """Compared against: each member's own BN (eps 0.1, eps_grad 1e-5, different weights) on its own slice,
    in float64: the packed output, input and parameter gradients, and the running statistics unpacked."""
    members = [_bn(0.1, 1e-5, layout=layout, seed=s) for s in range(2)]
    for s, m in enumerate(members):
        with torch.no_grad():
            m.weight.mul_(1 + s)
    packed = convert(members)
    assert isinstance(packed, PackedBatchNorm)
    xs = [_data(shape, 20 + s) for s in range(2)]
    gs = [_data(shape, 30 + s).detach() for s in range(2)]
    x = torch.stack([t.detach() for t in xs]).requires_grad_()  # (S, N, C): "m" layout
    if layout == "image":  # "c" layout: (N, S*C, H, W)
        x = x.detach().transpose(0, 1).flatten(1, 2).requires_grad_()
        g = torch.stack(gs).transpose(0, 1).flatten(1, 2)
    else:
        g = torch.stack(gs)
    y = packed(x)
    gx, gw, gb = torch.autograd.grad(y, [x, packed.weight, packed.bias], g)
    if layout == "image":
        y, gx = (t.view(N, 2, C, *shape[2:]).transpose(0, 1) for t in (y, gx))
    for k, m in enumerate(members):
        yk = m(xs[k])
        want = torch.autograd.grad(yk, [xs[k], m.weight, m.bias], gs[k])
        torch.testing.assert_close(y[k], yk, **TIGHT)
        torch.testing.assert_close(gx[k], want[0], **TIGHT)
        torch.testing.assert_close(gw.chunk(2)[k], want[1], **TIGHT)
        torch.testing.assert_close(gb.chunk(2)[k], want[2], **TIGHT)
    copies = [_bn(0.1, 1e-5, layout=layout, seed=s) for s in range(2)]
    unpack_into(packed, copies)
    for copy, m in zip(copies, members):
        torch.testing.assert_close(copy.running_mean, m.running_mean, **TIGHT)
        torch.testing.assert_close(copy.running_var, m.running_var, **TIGHT)


@pytest.mark.parametrize("value", [0, -1e-5, True, "small"])
def test_a_bad_eps_grad_is_one_line(value):
    with pytest.raises(UserError, match="eps_grad must be a number > 0"):
        norms.create("bn", C, "flat", eps_grad=value)


def test_norms_without_the_option_refuse_it():
    with pytest.raises(UserError, match="gn takes no option eps_grad"):
        norms.factory("gn", eps_grad=0.1)
