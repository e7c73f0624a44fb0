"""SeeDNorm (Cai et al., ICLR 2026, arXiv 2510.22777) and DyISRU (Stollenwerk, EACL 2026, arXiv 2503.21708)
against their definitions written out by hand in float64, value by value and token by token (outputs, and
gradients by autograd through the written-out formula), in every layout; their contract
(`normbench norms check`); and a short training run of each through the command line."""

import json
import math

import pytest
import torch
from conftest import normbench_cli

from normbench import norms
from normbench.errors import UserError
from normbench.norm_check import check

SHAPES = {"flat": (5, 8), "image": (3, 8, 2, 3), "seq": (3, 4, 8)}
C = 8


def _tokens(layout: str, shape) -> list[tuple]:
    """Index tuples of every token (a row of flat, a (sample, step) of seq, a (sample, :, h, w) of image):
    x[idx] is that token's C features."""
    if layout == "flat":
        return [(n,) for n in range(shape[0])]
    if layout == "seq":
        return [(n, t) for n in range(shape[0]) for t in range(shape[1])]
    return [(n, slice(None), h, w) for n in range(shape[0]) for h in range(shape[2]) for w in range(shape[3])]


def _seednorm_by_hand(x, alpha, beta, gamma, eps, groups, layout):
    """Cai et al. 2025 (arXiv 2510.22777), Eq. 1 per token v (C features), heads h of C/G channels:
    y_i = [tanh(sum_{j in h(i)} v_j beta_j) * alpha_i + gamma_i] * v_i / sqrt(sum_j v_j^2 / C + eps)."""
    out = torch.zeros_like(x)
    width = C // groups
    for idx in _tokens(layout, x.shape):
        v = x[idx]
        rms = torch.sqrt(sum(v[j] * v[j] for j in range(C)) / C + eps)
        for i in range(C):
            h = i // width
            dot = sum(v[j] * beta[j] for j in range(h * width, (h + 1) * width))
            y = (torch.tanh(dot) * alpha[i] + gamma[i]) * v[i] / rms
            if layout == "image":
                out[idx[0], i, idx[2], idx[3]] = y
            else:
                out[idx + (i,)] = y
    return out


def _dyisru_by_hand(x, beta, gamma, layout):
    """Stollenwerk 2026 (EACL; arXiv 2503.21708): y_i = gamma_i * sqrt(C) * x_i / sqrt(beta + x_i^2), per value,
    gamma over the channel dim."""
    out = torch.zeros_like(x)
    channel = 1 if layout == "image" else x.dim() - 1
    for idx in torch.cartesian_prod(*[torch.arange(s) for s in x.shape]).tolist():
        v = x[tuple(idx)]
        out[tuple(idx)] = gamma[idx[channel]] * math.sqrt(C) * v / torch.sqrt(beta + v * v)
    return out


def _grads(y, upstream, tensors):
    return torch.autograd.grad((y * upstream).sum(), tensors)


def _mask(layout):
    if layout != "seq":
        return None
    mask = torch.ones(SHAPES["seq"][:2], dtype=torch.bool)
    mask[-1, 2:] = False
    return mask


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("layout", ["flat", "image", "seq"])
def test_seednorm_against_its_definition(layout, groups):
    """Reference: Cai, Zhu, Liu & Min, "SeeDNorm: Self-Rescaled Dynamic Normalization" (ICLR 2026, arXiv
    2510.22777), Eq. 1, SeeDNorm(x) = [tanh(x beta^T) alpha + gamma] * x / RMS(x), RMS(x) = sqrt(mean x^2 + eps),
    per token (each position's channels on images), written out value by value in float64; groups=4 its
    multi-head form (one tanh per head of C/4 channels). Outputs and the gradients on x, alpha, beta and gamma
    (autograd through the module against autograd through the written-out sum) agree to 1e-12; on seq the
    padding mask changes nothing (each token on its own)."""
    torch.manual_seed(0)
    m = norms.create("seednorm", C, layout, groups=groups).double()
    # the initial values: alpha 1, beta 0, gamma 1 (swiss-ai/Megatron-LM's SeeDNorm, the paper's pseudocode)
    assert m.alpha.tolist() == [1.0] * C and m.beta.tolist() == [0.0] * C and m.weight.tolist() == [1.0] * C
    with torch.no_grad():
        m.alpha.copy_(torch.randn(C))
        m.beta.copy_(torch.randn(C) * 0.4)
        m.weight.copy_(1 + 0.3 * torch.randn(C))
    x = (torch.randn(SHAPES[layout], dtype=torch.float64) * 1.5 + 0.3).requires_grad_()
    mask = _mask(layout)
    y = m(x) if mask is None else m(x, mask)
    params = [p.detach().clone().requires_grad_() for p in (m.alpha, m.beta, m.weight)]
    ref = _seednorm_by_hand(x, *params, m.eps, groups, layout)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    if mask is not None:
        torch.testing.assert_close(m(x), y, rtol=0, atol=0)
    upstream = torch.randn_like(y)
    got = _grads(y, upstream, [x, m.alpha, m.beta, m.weight])
    want = _grads(ref, upstream, [x, *params])
    for name, g, w in zip(("x", "alpha", "beta", "gamma"), got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("layout", ["flat", "seq"])
def test_seednorm_starts_as_rmsnorm_and_affine_false_fixes_gamma(layout):
    """Reference: Cai et al. 2025 (arXiv 2510.22777): with beta = 0, tanh(x beta^T) = 0 and SeeDNorm is RMSNorm
    with gain gamma (torch's nn.RMSNorm at the same eps); norm.affine=false leaves gamma at 1 (no parameter)
    and keeps alpha and beta; norm.alpha_init sets every alpha."""
    torch.manual_seed(1)
    x = torch.randn(SHAPES[layout], dtype=torch.float64) * 3
    m = norms.create("seednorm", C, layout).double()
    torch.testing.assert_close(m(x), torch.nn.RMSNorm(C, eps=1e-6).double()(x), rtol=1e-13, atol=1e-13)
    bare = norms.create("seednorm", C, layout, affine=False, alpha_init=0.5).double()
    assert bare.weight is None and bare.alpha.tolist() == [0.5] * C
    with torch.no_grad():
        bare.beta.copy_(torch.randn(C))
    ref = _seednorm_by_hand(x, bare.alpha, bare.beta, torch.ones(C, dtype=torch.float64), 1e-6, 1, layout)
    torch.testing.assert_close(bare(x), ref, rtol=1e-12, atol=1e-12)


def test_seednorm_heads_must_divide_the_channels():
    """Reference: the multi-head form splits C channels into G equal heads: a G that does not divide C is refused
    at build, naming the divisors."""
    with pytest.raises(UserError, match="SeeDNorm groups=3 does not divide 8.*1, 2, 4, 8"):
        norms.create("seednorm", 8, "seq", groups=3)
    assert norms.create("seednorm", 8, "flat", groups=8)(torch.randn(2, 8)).shape == (2, 8)


@pytest.mark.parametrize("layout", ["flat", "image", "seq"])
def test_dyisru_against_its_definition(layout):
    """Reference: Stollenwerk, "On the Mathematical Relationship Between Layer Normalization and Dynamic
    Activation Functions" (EACL 2026, arXiv 2503.21708): DyISRU(x)_i = sqrt(C) x_i / sqrt(beta + x_i^2), beta one
    learned scalar, here with RMSNorm's per-channel gain gamma, written out value by value in float64. beta
    starts at C - 1 and gamma at 1; outputs and the gradients on x, beta and gamma agree to 1e-12; on seq the
    mask changes nothing."""
    torch.manual_seed(2)
    m = norms.create("dyisru", C, layout).double()
    assert m.beta.item() == C - 1 and m.weight.tolist() == [1.0] * C
    with torch.no_grad():
        m.beta.fill_(2.5)
        m.weight.copy_(1 + 0.3 * torch.randn(C))
    x = (torch.randn(SHAPES[layout], dtype=torch.float64) * 2 - 0.4).requires_grad_()
    mask = _mask(layout)
    y = m(x) if mask is None else m(x, mask)
    beta, gamma = (p.detach().clone().requires_grad_() for p in (m.beta, m.weight))
    ref = _dyisru_by_hand(x, beta, gamma, layout)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    if mask is not None:
        torch.testing.assert_close(m(x), y, rtol=0, atol=0)
    upstream = torch.randn_like(y)
    got = _grads(y, upstream, [x, m.beta, m.weight])
    want = _grads(ref, upstream, [x, beta, gamma])
    for name, g, w in zip(("x", "beta", "gamma"), got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=name)
    bare = norms.create("dyisru", C, layout, affine=False).double()
    assert bare.weight is None
    torch.testing.assert_close(bare(x), _dyisru_by_hand(x, torch.tensor(C - 1.0, dtype=torch.float64),
                                                         torch.ones(C, dtype=torch.float64), layout))


def test_dyisru_is_rmsnorm_where_beta_is_the_other_channels_sum_of_squares():
    """Reference: Stollenwerk 2026 (arXiv 2503.21708): RMSNorm's x_i / RMS(x) = sqrt(C) x_i / sqrt(x_i^2 +
    sum_{j != i} x_j^2); DyISRU puts beta in place of sum_{j != i} x_j^2, so where that sum is the same for
    every i (all |x_j| = c) and beta equals it, DyISRU is RMSNorm exactly; elsewhere its outputs stay within
    RMSNorm's bounds +-sqrt(C)."""
    c = 1.7
    signs = torch.tensor([1, -1, -1, 1, 1, 1, -1, 1], dtype=torch.float64)
    x = (c * signs).expand(3, C)
    m = norms.create("dyisru", C, "flat").double()
    with torch.no_grad():
        m.beta.fill_((C - 1) * c * c)
    torch.testing.assert_close(m(x), torch.nn.functional.rms_norm(x, (C,), eps=0.0), rtol=1e-14, atol=1e-14)
    big = torch.randn(4, C, dtype=torch.float64) * 1e4
    assert (m(big).abs() < math.sqrt(C)).all()


@pytest.mark.parametrize("name", ["seednorm", "dyisru"])
def test_contract(name):
    """Reference: normbench/norm_check.py, the contract every catalog norm passes (`normbench norms check`):
    shapes on every layout, train and eval, batch independence as declared, exact resume, packing (the
    per-member fallback: neither has a packed form) and gradcheck."""
    items = check(name)
    assert [i.name for i in items] == ["shape flat", "shape image", "shape seq", "train and eval", "batch dependence",
                                       "state round trip and resume", "packing", "gradients"]
    assert all(i.ok for i in items), [i for i in items if not i.ok]


@pytest.mark.parametrize("name", ["seednorm", "dyisru"])
def test_trains_a_transformer_from_the_command_line(name, tiny_root, tmp_path):
    """Reference: the README's `normbench train norm=NAME model=transformer`: 5 steps complete, and results.json
    records the norm and its options as built."""
    run_dir = tmp_path / "run"
    r = normbench_cli("train", f"norm={name}", "model=transformer", "max_steps=5", "data.subset=600",
                      "data.val_size=100", f"data.root={tiny_root}", "data.download=false", "threads=1",
                      "progress=false", "tensorboard=false", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads((run_dir / "results.json").read_text())
    assert res["status"] == "completed" and res["config"]["norm"]["name"] == name
    assert math.isfinite(res["test_acc"])
    for option, default in norms.get(name).options().items():
        assert res["config"]["norm"][option] == default
