"""The norms PyTorch does not ship (sn, brn, frn, evonorm, cn, dyt, derf), and wn and rms once more, against NumPy
ports of their papers' equations and algorithms in float64, with non-trivial learned parameters."""

import numpy as np
import pytest
import torch

from normbench import norms

RNG = np.random.default_rng(0)


def _set(module, **values):
    with torch.no_grad():
        for name, v in values.items():
            getattr(module, name).copy_(torch.as_tensor(v, dtype=getattr(module, name).dtype))


def _per_channel(v, layout):
    return v.reshape((1, -1, 1, 1) if layout == "image" else (1, -1))


@pytest.mark.parametrize("layout", ["image", "flat"])
def test_frn_against_the_papers_algorithm(layout):
    """Reference: Singh & Krishnan, Algorithm 1: nu2 = mean(x^2 over H, W); x = x * rsqrt(nu2 + |eps|);
    max(gamma x + beta, tau). On flat features (1x1 maps) eps is learned: eps + |eps_l|."""
    x = RNG.normal(1, 2, (4, 6, 5, 5) if layout == "image" else (4, 6))
    gamma, beta, tau = RNG.uniform(0.5, 1.5, 6), RNG.normal(0, 1, 6), RNG.normal(0, 0.3, 6)
    frn = norms.create("frn", 6, layout).double()
    _set(frn, weight=gamma, bias=beta, tau=tau)
    eps = 1e-6 + (np.abs(frn.eps_l.detach().numpy()) if layout == "flat" else 0)
    nu2 = (x ** 2).mean(axis=(2, 3), keepdims=True) if layout == "image" else x ** 2
    expected = np.maximum(_per_channel(gamma, layout) * x / np.sqrt(nu2 + _per_channel(np.asarray(eps), layout)
                                                                     if layout == "flat" else nu2 + eps)
                          + _per_channel(beta, layout), _per_channel(tau, layout))
    np.testing.assert_allclose(frn(torch.tensor(x)).detach().numpy(), expected, rtol=1e-10)


def test_evonorm_s0_against_the_papers_algorithm():
    """Reference: Liu et al., Algorithm 1 (EvoNorm-S0): x * sigmoid(v x) / group_std(x) * gamma + beta,
    group_std over (H, W, C/G) with tf.nn.moments' (biased) variance + eps."""
    n, c, g = 3, 8, 2
    x = RNG.normal(0.5, 2, (n, c, 4, 5))
    gamma, beta, v = RNG.uniform(0.5, 1.5, c), RNG.normal(0, 1, c), RNG.uniform(0.5, 2, c)
    evo = norms.create("evonorm", c, "image", groups=g).double()
    _set(evo, weight=gamma, bias=beta, v=v)
    groups = x.reshape(n, g, c // g, 4, 5)
    std = np.sqrt(groups.var(axis=(2, 3, 4), keepdims=True) + 1e-5)
    std = np.broadcast_to(std, groups.shape).reshape(x.shape)
    vv, gg, bb = (a.reshape(1, c, 1, 1) for a in (v, gamma, beta))
    expected = x / (1 + np.exp(-vv * x)) / std * gg + bb
    np.testing.assert_allclose(evo(torch.tensor(x)).detach().numpy(), expected, rtol=1e-10)


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def test_switchable_norm_against_the_papers_equations():
    """Reference: Luo et al. 2018, eq. (1)-(4): IN, LN, BN means and (biased) variances of the same input,
    mixed by softmax(lambda) for the means and softmax(lambda') for the variances; then the running
    BN statistics (unbiased variance, momentum 0.1) are what eval mixes in."""
    x = RNG.normal(1, 2, (4, 6, 3, 5))
    lam, lam_v = RNG.normal(0, 1, 3), RNG.normal(0, 1, 3)
    gamma, beta = RNG.uniform(0.5, 1.5, 6), RNG.normal(0, 1, 6)
    sn = norms.create("sn", 6, "image").double()
    _set(sn, mean_weight=lam, var_weight=lam_v, weight=gamma, bias=beta)
    stats = {"in": (2, 3), "ln": (1, 2, 3), "bn": (0, 2, 3)}
    means = [x.mean(axis=a, keepdims=True) for a in stats.values()]
    variances = [x.var(axis=a, keepdims=True) for a in stats.values()]

    def mix(means, variances):
        mean = sum(w * m for w, m in zip(_softmax(lam), means))
        var = sum(w * v for w, v in zip(_softmax(lam_v), variances))
        return (x - mean) / np.sqrt(var + 1e-5) * gamma.reshape(1, 6, 1, 1) + beta.reshape(1, 6, 1, 1)

    np.testing.assert_allclose(sn(torch.tensor(x)).detach().numpy(), mix(means, variances), rtol=1e-9)
    running_mean = 0.1 * means[2]
    running_var = 0.9 + 0.1 * variances[2] * 60 / 59  # 60 values per channel
    sn.eval()
    expected = mix(means[:2] + [running_mean], variances[:2] + [running_var])
    np.testing.assert_allclose(sn(torch.tensor(x)).detach().numpy(), expected, rtol=1e-9)


def test_batch_renorm_against_the_papers_algorithm():
    """Reference: Ioffe 2017, Algorithm 1: sigma_B = sqrt(var_B + eps); r = clip(sigma_B / sigma, 1/r_max,
    r_max); d = clip((mu_B - mu) / sigma, -d_max, d_max); y = gamma ((x - mu_B) / sigma_B * r + d) + beta;
    mu += alpha (mu_B - mu). (Our running variance is BN's: an average of unbiased batch variances, where
    the paper averages sigma_B.)"""
    x = RNG.normal(2, 3, (16, 5))
    mu, var = RNG.normal(0, 1, 5), RNG.uniform(0.5, 20, 5)
    gamma, beta = RNG.uniform(0.5, 1.5, 5), RNG.normal(0, 1, 5)
    brn = norms.create("brn", 5, "flat", r_max=2.0, d_max=0.5, renorm_warmup_frac=0, renorm_r_ramp_frac=0,
                       renorm_d_ramp_frac=0).double()
    _set(brn, running_mean=mu, running_var=var, weight=gamma, bias=beta)
    eps = 1e-5
    mu_b, sigma_b = x.mean(0), np.sqrt(x.var(0) + eps)
    sigma = np.sqrt(var + eps)
    r = np.clip(sigma_b / sigma, 1 / 2.0, 2.0)
    d = np.clip((mu_b - mu) / sigma, -0.5, 0.5)
    assert (r == 2.0).any() or (r == 0.5).any() or (np.abs(d) == 0.5).any(), "the clipping is exercised"
    expected = gamma * ((x - mu_b) / sigma_b * r + d) + beta
    np.testing.assert_allclose(brn(torch.tensor(x)).detach().numpy(), expected, rtol=1e-9)
    np.testing.assert_allclose(brn.running_mean.numpy(), mu + 0.1 * (mu_b - mu), rtol=1e-12)


def test_cosine_norm_against_the_definition():
    """Reference: Luo et al. 2017, eq. (4): net = cos(w, x) = w . x / (|w| |x|), the bias as w_0 with x_0 = 1;
    for a convolution, per output position over the input patch (zero padding included)."""
    make = norms.factory("cn")
    lin = make.linear(7, 3).double()
    x = RNG.normal(0, 2, (5, 7))
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    xa = np.concatenate([x, np.ones((5, 1))], 1)
    wa = np.concatenate([w, b[:, None]], 1)
    expected = xa @ wa.T / np.linalg.norm(xa, axis=1, keepdims=True) / np.linalg.norm(wa, axis=1)
    np.testing.assert_allclose(lin(torch.tensor(x)).detach().numpy(), expected, rtol=1e-10)

    conv = make.conv2d(2, 3, 3, padding=1).double()
    img = RNG.normal(0, 1, (2, 2, 4, 4))
    padded = np.pad(img, ((0, 0), (0, 0), (1, 1), (1, 1)))
    w, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()
    expected = np.zeros((2, 3, 4, 4))
    for i in range(4):
        for j in range(4):
            patch = np.concatenate([padded[:, :, i:i + 3, j:j + 3].reshape(2, -1), np.ones((2, 1))], 1)
            filt = np.concatenate([w.reshape(3, -1), b[:, None]], 1)
            expected[:, :, i, j] = patch @ filt.T / np.linalg.norm(patch, axis=1, keepdims=True) / np.linalg.norm(
                filt, axis=1)
    np.testing.assert_allclose(conv(torch.tensor(img)).detach().numpy(), expected, rtol=1e-10)
    assert np.abs(expected).max() <= 1


@pytest.mark.parametrize("impl", ["native", "scratch"])
def test_weight_norm_against_the_definition(impl):
    """Reference: Salimans & Kingma, eq. (2): w = g / ||v|| v, per output unit; starting with g = ||v||."""
    lin = norms.factory("wn", impl=impl).linear(6, 4).double()
    v = (lin.parametrizations.weight.original1 if impl == "native" else lin.weight_v).detach().numpy()
    g = (lin.parametrizations.weight.original0 if impl == "native" else lin.weight_g).detach().numpy()
    np.testing.assert_allclose(g.ravel(), np.linalg.norm(v, axis=1), rtol=1e-6)  # set in float32
    g_param = lin.parametrizations.weight.original0 if impl == "native" else lin.weight_g
    with torch.no_grad():
        g_param.copy_(torch.tensor(RNG.uniform(0.5, 2, (4, 1))))
    x = RNG.normal(0, 1, (5, 6))
    w = g_param.detach().numpy() / np.linalg.norm(v, axis=1, keepdims=True) * v
    expected = x @ w.T + lin.bias.detach().numpy()
    np.testing.assert_allclose(lin(torch.tensor(x)).detach().numpy(), expected, rtol=1e-10)


@pytest.mark.parametrize("layout", ["flat", "image", "seq"])
def test_rms_norm_against_the_definition(layout):
    """Reference: Zhang & Sennrich, eq. (4): a / sqrt(mean(a^2) + eps) * g over the features of a sample."""
    shape = {"flat": (3, 6), "image": (3, 6, 2, 4), "seq": (3, 5, 6)}[layout]
    x = RNG.normal(1, 2, shape)
    gain = RNG.uniform(0.5, 1.5, 6)
    rms = norms.create("rms", 6, layout).double()
    next(rms.parameters()).data.copy_(torch.tensor(gain))
    axes = {"flat": (1,), "image": (1, 2, 3), "seq": (2,)}[layout]
    g = gain.reshape({"flat": (1, 6), "image": (1, 6, 1, 1), "seq": (1, 1, 6)}[layout])
    expected = x / np.sqrt((x ** 2).mean(axis=axes, keepdims=True) + 1e-8) * g
    np.testing.assert_allclose(rms(torch.tensor(x)).detach().numpy(), expected, rtol=1e-10)


@pytest.mark.parametrize("layout", ["flat", "image", "seq"])
def test_dyt_against_the_papers_definition(layout):
    """Reference: Zhu et al. 2025, eq. (1) and Algorithm 1: DyT(x) = gamma * tanh(alpha x) + beta, alpha a
    scalar initialized to alpha_0 = 0.5, gamma = 1 and beta = 0 per channel; and its gradients written out
    by hand: d/dx = gamma alpha (1 - t^2), d/dalpha = sum gamma x (1 - t^2), d/dgamma = sum t, d/dbeta = sum 1
    (t = tanh(alpha x)), against autograd in float64. No statistics: padding changes nothing else."""
    shape = {"flat": (3, 6), "image": (3, 6, 2, 4), "seq": (3, 5, 6)}[layout]
    channel = {"flat": (1, 6), "image": (1, 6, 1, 1), "seq": (1, 1, 6)}[layout]
    dyt = norms.create("dyt", 6, layout).double()
    assert dyt.alpha.item() == 0.5 and dyt.weight.tolist() == [1.0] * 6 and dyt.bias.tolist() == [0.0] * 6
    x = RNG.normal(0, 3, shape)
    alpha, gamma, beta = 0.8, RNG.uniform(0.5, 1.5, 6), RNG.normal(0, 1, 6)
    _set(dyt, alpha=alpha, weight=gamma, bias=beta)
    xt = torch.tensor(x, requires_grad=True)
    out = dyt(xt)
    t = np.tanh(alpha * x)
    np.testing.assert_allclose(out.detach().numpy(), gamma.reshape(channel) * t + beta.reshape(channel), rtol=1e-12)
    up = RNG.normal(0, 1, shape)  # the gradient arriving from above
    out.backward(torch.tensor(up))
    axes = tuple(i for i in range(len(shape)) if channel[i] == 1)
    slope = up * gamma.reshape(channel) * (1 - t * t)
    # 1 - t^2 cancels where tanh saturates: there the values are ~1e-6 and agree to 1e-16 absolute
    np.testing.assert_allclose(xt.grad.numpy(), slope * alpha, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(dyt.alpha.grad.item(), (slope * x).sum(), rtol=1e-10)
    np.testing.assert_allclose(dyt.weight.grad.numpy(), (up * t).sum(axis=axes), rtol=1e-12)
    np.testing.assert_allclose(dyt.bias.grad.numpy(), up.sum(axis=axes), rtol=1e-12)
    if layout == "seq":  # padding (the mask) changes nothing: every value on its own
        mask = torch.ones(shape[:2], dtype=torch.bool)
        mask[0, 3:] = False
        torch.testing.assert_close(dyt(torch.tensor(x), mask), out.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["flat", "image", "seq"])
def test_derf_against_the_papers_definition(layout):
    """Reference: Chen et al. 2025 (arXiv 2512.10938) and its authors' Dynamic_erf (github.com/zlab-princeton/
    Derf, ViT/dynamic_erf.py): Derf(x) = gamma * erf(alpha x + s) + beta, alpha and s scalars initialized to 0.5
    and 0, gamma = 1 and beta = 0 per channel; erf from scipy.special in float64. Its gradients written out by
    hand (u = alpha x + s, e = erf(u), g = 2 / sqrt(pi) exp(-u^2) = erf'(u)): d/dx = gamma alpha g,
    d/dalpha = sum gamma x g, d/ds = sum gamma g, d/dgamma = sum e, d/dbeta = sum 1, against autograd. The
    declared inits reach the parameters, affine=false drops gamma and beta, and padding changes nothing."""
    from scipy.special import erf

    shape = {"flat": (3, 6), "image": (3, 6, 2, 4), "seq": (3, 5, 6)}[layout]
    channel = {"flat": (1, 6), "image": (1, 6, 1, 1), "seq": (1, 1, 6)}[layout]
    derf = norms.create("derf", 6, layout).double()
    assert (derf.alpha.item(), derf.shift.item()) == (0.5, 0.0)
    assert derf.weight.tolist() == [1.0] * 6 and derf.bias.tolist() == [0.0] * 6
    x = RNG.normal(0, 3, shape)
    alpha, shift, gamma, beta = 0.8, -0.3, RNG.uniform(0.5, 1.5, 6), RNG.normal(0, 1, 6)
    _set(derf, alpha=alpha, shift=shift, weight=gamma, bias=beta)
    xt = torch.tensor(x, requires_grad=True)
    out = derf(xt)
    u = alpha * x + shift
    e = erf(u)
    np.testing.assert_allclose(out.detach().numpy(), gamma.reshape(channel) * e + beta.reshape(channel), rtol=1e-12)
    up = RNG.normal(0, 1, shape)  # the gradient arriving from above
    out.backward(torch.tensor(up))
    axes = tuple(i for i in range(len(shape)) if channel[i] == 1)
    slope = up * gamma.reshape(channel) * 2 / np.sqrt(np.pi) * np.exp(-u * u)
    # exp(-u^2) underflows where erf saturates: there the values are ~0 and agree to 1e-14 absolute
    np.testing.assert_allclose(xt.grad.numpy(), slope * alpha, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(derf.alpha.grad.item(), (slope * x).sum(), rtol=1e-10)
    np.testing.assert_allclose(derf.shift.grad.item(), slope.sum(), rtol=1e-10)
    np.testing.assert_allclose(derf.weight.grad.numpy(), (up * e).sum(axis=axes), rtol=1e-12)
    np.testing.assert_allclose(derf.bias.grad.numpy(), up.sum(axis=axes), rtol=1e-12)
    declared = norms.create("derf", 6, layout, alpha_init=1.5, shift_init=0.25, affine=False).double()
    assert (declared.alpha.item(), declared.shift.item(), declared.weight, declared.bias) == (1.5, 0.25, None, None)
    np.testing.assert_allclose(declared(torch.tensor(x)).detach().numpy(), erf(1.5 * x + 0.25), rtol=1e-12)
    if layout == "seq":  # padding (the mask) changes nothing: every value on its own
        mask = torch.ones(shape[:2], dtype=torch.bool)
        mask[0, 3:] = False
        torch.testing.assert_close(derf(torch.tensor(x), mask), out.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("name,layout,options", [
    ("frn", "image", {}), ("frn", "image", {"learn_eps": True}), ("frn", "flat", {}), ("frn", "seq", {}),
    ("evonorm", "image", {"groups": 2}), ("evonorm", "flat", {"groups": 2}), ("evonorm", "seq", {"groups": 2})])
def test_hand_written_backward_passes_match_autograd(name, layout, options):
    """Reference: torch.autograd.gradcheck (finite differences, float64) of FRN's and EvoNorm-S0's
    hand-written backward (fused.py), with respect to the input and every parameter."""
    torch.manual_seed(0)
    m = norms.create(name, 4, layout, **options).double()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.rand_like(p) * 0.5)  # away from the symmetric initial values
        if name == "frn" and m.eps_l is not None:
            m.eps_l.fill_(0.3)  # a learned eps large enough for finite differences to resolve
    shape = {"image": (3, 4, 3, 2), "flat": (5, 4), "seq": (2, 3, 4)}[layout]
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    names = [n for n, _ in m.named_parameters()]

    def f(x, *ps):
        return torch.func.functional_call(m, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(f, (x, *[p.detach().clone().requires_grad_() for p in m.parameters()]))


@pytest.mark.parametrize("layout", ["flat", "image", "seq"])
def test_power_norm_against_algorithm_1_by_hand(layout):
    """Reference: Shen et al. 2020, Algorithm 1, written out in NumPy over three training steps in float64:
    x_hat = x / sqrt(psi_{t-1}^2 + eps) (the running value, not this batch's), y = gamma x_hat + beta,
    psi_t^2 = 0.9 psi^2 + 0.1 mean(x^2); backward g = gamma dL/dy, g' = g - nu_{t-1} x_hat,
    dL/dx = g' / sqrt(psi_{t-1}^2 + eps), nu_t = nu_{t-1} (1 - 0.1 mean(x_hat^2)) + 0.1 mean(x_hat g);
    means per channel over the batch (+H, W; + real tokens only, padding output 0 with no gradient).
    Then inference with the final psi, and training-mode passes without autograd leave psi and nu alone."""
    shape = {"flat": (4, 5), "image": (3, 5, 2, 3), "seq": (3, 4, 5)}[layout]
    channel = {"flat": (1, 5), "image": (1, 5, 1, 1), "seq": (1, 1, 5)}[layout]
    axes = tuple(i for i in range(len(shape)) if channel[i] == 1)
    pn = norms.create("pn", 5, layout).double()
    gamma, beta = RNG.uniform(0.5, 1.5, 5), RNG.normal(0, 1, 5)
    _set(pn, weight=gamma, bias=beta)
    mask = None
    w = np.ones(shape[:2] + (1,)) if layout == "seq" else np.ones(shape)
    if layout == "seq":
        mask = torch.ones(shape[:2], dtype=torch.bool)
        mask[0, 2:] = False
        mask[2, 3:] = False
        w = mask.numpy()[..., None].astype(float)
    w = np.broadcast_to(w, shape)
    psi2, nu, eps, m = np.ones(5), np.zeros(5), 1e-5, 0.1
    count = w.sum(axis=axes)
    for step in range(3):
        x = RNG.normal(0.5, 2.0, shape) * w
        up = RNG.normal(0, 1, shape)
        xt = torch.tensor(x, requires_grad=True)
        pn.weight.grad = pn.bias.grad = None
        out = pn(xt, mask)
        out.backward(torch.tensor(up))
        scale = 1 / np.sqrt(psi2 + eps)
        x_hat = x * scale.reshape(channel) * w
        y = (gamma.reshape(channel) * x_hat + beta.reshape(channel)) * w
        g = up * w * gamma.reshape(channel)
        g_approx = g - nu.reshape(channel) * x_hat
        grad_x = g_approx * scale.reshape(channel)
        np.testing.assert_allclose(out.detach().numpy(), y, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(xt.grad.numpy(), grad_x, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(pn.weight.grad.numpy(), (up * w * x_hat).sum(axis=axes), rtol=1e-12)
        np.testing.assert_allclose(pn.bias.grad.numpy(), (up * w).sum(axis=axes), rtol=1e-12)
        psi2 = (1 - m) * psi2 + m * (x * x * w).sum(axis=axes) / count
        nu = nu * (1 - m * (x_hat ** 2).sum(axis=axes) / count) + m * (x_hat * g).sum(axis=axes) / count
        np.testing.assert_allclose(pn.running_phi.numpy(), psi2, rtol=1e-12)
        np.testing.assert_allclose(pn.running_nu.numpy(), nu, rtol=1e-12, atol=1e-15)
        if layout == "seq":  # padding: output 0, and no gradient flows into it
            assert (out.detach().numpy()[w == 0] == 0).all() and (xt.grad.numpy()[w == 0] == 0).all()
    x = RNG.normal(0, 1, shape)
    with torch.no_grad():  # training mode without autograd: the running values, nothing updated
        train_mode = pn(torch.tensor(x), mask).numpy()
    np.testing.assert_allclose(pn.running_phi.numpy(), psi2, rtol=1e-12)
    pn.eval()
    expected = (x / np.sqrt(psi2 + eps).reshape(channel) * gamma.reshape(channel) + beta.reshape(channel)) * w
    np.testing.assert_allclose(pn(torch.tensor(x), mask).detach().numpy(), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(train_mode, expected, rtol=1e-12, atol=1e-14)
