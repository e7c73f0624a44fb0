"""From-scratch twins against PyTorch's kernels: outputs, input and parameter gradients, running statistics,
in train and eval mode, for every layout each norm defines (the catalog's `impl` option). In float64, so
the tolerance can be tight enough (1e-10) that any difference in the definition shows."""

import pytest
import torch

from normbench import norms

SHAPES = {"flat": (6, 16), "image": (5, 16, 6, 7), "seq": (4, 9, 16)}
WITH_IMPL = [n for n in norms.names() if "impl" in norms.get(n).options() and n != "wn"]
TIGHT = dict(rtol=1e-10, atol=1e-10)
CASES = [(n, layout, masked) for n in WITH_IMPL for layout in norms.get(n).layouts
         for masked in ((False, True) if layout == "seq" else (False,))]


def _mask(shape):
    lengths = torch.tensor([9, 4, 7, 1])[: shape[0]]
    return torch.arange(shape[1]) < lengths[:, None]


def _pair(name, layout, **options):
    """The native module and its scratch twin with the same (non-trivial) parameters."""
    torch.manual_seed(0)
    native = norms.create(name, 16, layout, **options).double()
    scratch = norms.create(name, 16, layout, impl="scratch", **options).double()
    with torch.no_grad():
        for p in native.parameters():
            p.uniform_(0.5, 1.5)
    scratch_params = dict(scratch.named_parameters())
    for pname, p in native.named_parameters():
        leaf = pname.rpartition(".")[2]
        scratch_params[leaf].data.copy_(p.data)
    return native, scratch


def _run(module, x, mask, grad_out):
    x = x.clone().requires_grad_()
    y = module(x, mask) if mask is not None else module(x)
    y.backward(grad_out)
    grads = {k.rpartition(".")[2]: p.grad.clone() for k, p in module.named_parameters()}
    return y.detach(), x.grad, grads


def _buffers(module):
    return {k.rpartition(".")[2]: b for k, b in module.named_buffers()}


@pytest.mark.parametrize("name,layout,masked", CASES)
def test_scratch_equals_native(name, layout, masked):
    """Reference: torch's own kernel (nn.BatchNorm/LayerNorm/GroupNorm/InstanceNorm2d/RMSNorm)."""
    native, scratch = _pair(name, layout)
    torch.manual_seed(1)
    mask = _mask(SHAPES[layout]) if masked else None
    for step in range(3):  # a few training steps, so the running statistics move
        x = torch.randn(SHAPES[layout], dtype=torch.float64) * 3 + 1
        g = torch.randn(SHAPES[layout], dtype=torch.float64)
        y_n, dx_n, dp_n = _run(native, x, mask, g)
        y_s, dx_s, dp_s = _run(scratch, x, mask, g)
        torch.testing.assert_close(y_s, y_n, **TIGHT)
        torch.testing.assert_close(dx_s, dx_n, **TIGHT)
        assert dp_n.keys() == dp_s.keys()
        for k in dp_n:
            torch.testing.assert_close(dp_s[k], dp_n[k], **TIGHT)
        native.zero_grad(), scratch.zero_grad()
    bn, bs = _buffers(native), _buffers(scratch)
    assert set(bn) == set(bs)
    for k in bn:
        torch.testing.assert_close(bs[k], bn[k], **TIGHT)
    native.eval(), scratch.eval()
    x = torch.randn(SHAPES[layout], dtype=torch.float64)
    g = torch.randn(SHAPES[layout], dtype=torch.float64)
    y_n, dx_n, _ = _run(native, x, mask, g)
    y_s, dx_s, _ = _run(scratch, x, mask, g)
    torch.testing.assert_close(y_s, y_n, **TIGHT)
    torch.testing.assert_close(dx_s, dx_n, **TIGHT)


@pytest.mark.parametrize("name", ["bn", "brn", "sn"])
def test_sync_free_masked_path_equals_gather_path(name):
    """Reference: the CPU path (gather the real tokens, normalize them with the flat module). The accelerator
    path weights rows by the mask instead, so it never needs the data-dependent count on the host."""
    torch.manual_seed(0)
    opts = {"renorm_warmup_frac": 0.0, "renorm_r_ramp_frac": 0.5, "renorm_d_ramp_frac": 0.5} if name == "brn" else {}
    gather, weighted = norms.create(name, 16, "seq", **opts), norms.create(name, 16, "seq", **opts)
    norms.set_total_steps(gather, 4), norms.set_total_steps(weighted, 4)  # r, d bounds move during the test
    weighted.load_state_dict(gather.state_dict())
    rows_fn = weighted._weighted_rows if name == "sn" else weighted._weighted
    mask = _mask(SHAPES["seq"])
    for train in (True, True, True, False):
        gather.train(train), weighted.train(train)
        x = torch.randn(SHAPES["seq"]) * 2 - 1
        g = torch.randn(SHAPES["seq"])
        y_g, dx_g, dp_g = _run(gather, x, mask, g)
        xw = x.clone().requires_grad_()
        y_w = rows_fn(xw.reshape(-1, 16), mask.reshape(-1, 1).float()).view(x.shape)
        y_w.backward(g)
        torch.testing.assert_close(y_w.detach(), y_g, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(xw.grad, dx_g, rtol=1e-4, atol=1e-5)
        for k, p in weighted.named_parameters():
            torch.testing.assert_close(p.grad, dp_g[k], rtol=1e-4, atol=1e-4)
        gather.zero_grad(), weighted.zero_grad()
    for (k, a), (_, b) in zip(gather.named_buffers(), weighted.named_buffers()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("layer", ["linear", "conv2d"])
def test_scratch_weight_norm_equals_native(layer):
    """Reference: torch.nn.utils.parametrizations.weight_norm (w = g v / ||v||, dim 0)."""
    torch.manual_seed(0)
    native, scratch = norms.factory("wn"), norms.factory("wn", impl="scratch")
    if layer == "linear":
        native, scratch = native.linear(12, 7), scratch.linear(12, 7)
        x = torch.randn(5, 12)
    else:
        native, scratch = native.conv2d(3, 7, 3, padding=1), scratch.conv2d(3, 7, 3, padding=1)
        x = torch.randn(2, 3, 6, 6)
    assert type(native) is not type(scratch)  # the factory picked the twin
    with torch.no_grad():
        scratch.weight_v.copy_(native.parametrizations.weight.original1)
        scratch.weight_g.copy_(native.parametrizations.weight.original0.uniform_(0.5, 2))
        scratch.bias.copy_(native.bias)
    g = torch.randn_like(native(x))
    y_n, dx_n, _ = _run(native, x, None, g)
    y_s, dx_s, _ = _run(scratch, x, None, g)
    torch.testing.assert_close(y_s, y_n)
    torch.testing.assert_close(dx_s, dx_n)
    p = native.parametrizations.weight
    torch.testing.assert_close(scratch.weight_g.grad, p.original0.grad)
    torch.testing.assert_close(scratch.weight_v.grad, p.original1.grad)
    torch.testing.assert_close(scratch.bias.grad, native.bias.grad)


def test_impl_is_checked_and_only_where_a_kernel_exists():
    """Reference: the catalog: impl applies to the norms PyTorch ships (bn, ln, in, gn, rms, wn)."""
    from normbench.errors import UserError

    assert sorted(n for n in norms.names() if "impl" in norms.get(n).options()) == sorted(
        ["bn", "ln", "in", "gn", "rms", "wn"])
    with pytest.raises(UserError, match="native .* or scratch"):
        norms.create("bn", 8, "flat", impl="fast")
    with pytest.raises(UserError, match="no PyTorch kernel"):
        norms.create("sn", 8, "flat", impl="scratch")
