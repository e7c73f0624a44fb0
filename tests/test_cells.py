"""The RNN's recurrent placement (cells.py) against step-by-step references written from the papers:
recurrent BN with statistics per time step (Cooijmans et al. 2016) and LN-LSTM (Ba et al. 2016)."""

import pytest
import torch
import torch.nn.functional as F

from normbench import models, norms
from normbench.config import ModelConfig
from normbench.errors import UserError
from normbench.models import cells

EPS = 1e-5


def _layer(cell, norm="bn", inp=6, hidden=5, dtype=torch.float64, **options):
    torch.manual_seed(0)
    layer = cells.recurrent_layer(cell, inp, hidden, norms.factory(norm, **options), "recurrent").to(dtype)
    with torch.no_grad():  # non-trivial scales and shifts, shared by every step
        for name, p in layer.named_parameters():
            if name.endswith(("norm.weight", "norm.norm.weight")):
                p.uniform_(0.5, 1.5)
            elif name.endswith(("norm.bias", "norm.norm.bias")) or name == "bias":
                p.uniform_(-0.5, 0.5)
    return layer


def _bn(a, real, gamma, beta, state, training, momentum=0.1):
    """Ioffe & Szegedy over the rows still running (`real`): batch statistics in training, updating
    `state` = [running mean, running var] in place; the running statistics in eval."""
    if training:
        rows = a[real]
        mu, var = rows.mean(0), rows.var(0, correction=0)
        state[0] = (1 - momentum) * state[0] + momentum * mu.detach()
        state[1] = (1 - momentum) * state[1] + momentum * rows.var(0, correction=1).detach()
    else:
        mu, var = state
    y = gamma * (a - mu) / torch.sqrt(var + EPS)
    return y if beta is None else y + beta


def _eq6_reference(layer, seq, lengths, states, training):
    """Cooijmans et al. 2016, eq. (6-8), step by step, from the layer's parameter tensors only:
    gates = BN(W_h h; gamma_h) + BN(W_x x; gamma_x) + b (no beta on either), c_t = sig(f) c + sig(i) tanh(g),
    h_t = sig(o) tanh(BN(c_t; gamma_c, beta_c)); for the tanh cell h_t = tanh(BN(W_x x) + BN(W_h h) + b).
    Statistics per step t over the samples with length > t. `states[place][t]` are step t's running
    statistics; a step first reached in training starts from step t - 1's (the layer's first guess); in
    eval a step past the trained ones uses the last one's. Gate order i, f, g, o (torch's)."""
    w_x, w_h, b = layer.ih.weight, layer.hh.weight, layer.bias
    gx, gh = layer.norm_x.norm.weight, layer.norm_h.norm.weight
    n = seq.shape[0]
    h = c = seq.new_zeros(n, layer.hidden)
    outs = []
    for t in range(seq.shape[1]):
        real = lengths > t
        per_place = {}
        for place in states:
            if training and len(states[place]) <= t:
                states[place].append(list(states[place][t - 1]))
            per_place[place] = states[place][min(t, len(states[place]) - 1)]
        a = (_bn(seq[:, t] @ w_x.T, real, gx, None, per_place["x"], training)
             + _bn(h @ w_h.T, real, gh, None, per_place["h"], training) + b)
        if layer.cell == "rnn":
            h = torch.tanh(a)
        else:
            i, f, g, o = a.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            bc = _bn(c, real, layer.norm_c.norm.weight, layer.norm_c.norm.bias, per_place["c"], training)
            h = torch.sigmoid(o) * torch.tanh(bc)
        outs.append(h)
    return torch.stack(outs, 1)


def _running(layer, place):
    norm = getattr(layer, f"norm_{place}")
    return [[norm.at(t).running_mean, norm.at(t).running_var] for t in range(norm.trained_steps)]


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_recurrent_bn_matches_cooijmans_eq6_step_by_step(cell):
    """Reference: Cooijmans et al. 2016, eq. (6-8) written out per step in float64 (_eq6_reference): outputs
    on real steps and every parameter's gradient over two training batches of variable length, each step's
    running statistics, then eval on longer sequences (past the trained steps: the last step's statistics)."""
    layer = _layer(cell)
    places = ("x", "h", "c") if cell == "lstm" else ("x", "h")
    size = {"x": layer.norm_x.features, "h": layer.norm_x.features, "c": layer.hidden}
    states = {p: [[torch.zeros(size[p], dtype=torch.float64), torch.ones(size[p], dtype=torch.float64)]]
              for p in places}
    params = dict(layer.named_parameters())
    for batch, lengths in enumerate((torch.tensor([5, 3, 5, 2]), torch.tensor([4, 5, 2, 5]))):
        seq = torch.randn(4, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(batch)) * 2
        mask = torch.arange(5) < lengths[:, None]
        out = layer(seq, mask)
        ref = _eq6_reference(layer, seq, lengths, states, training=True)
        torch.testing.assert_close(out[mask], ref[mask], rtol=1e-10, atol=1e-10)
        g = torch.randn_like(out) * mask[..., None]
        grads = torch.autograd.grad(out, list(params.values()), g)
        grads_ref = torch.autograd.grad(ref, list(params.values()), g)
        for name, a, r in zip(params, grads, grads_ref):
            torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-10, msg=name)
    for place in places:
        assert len(_running(layer, place)) == 5
        for t, ((m, v), (m_ref, v_ref)) in enumerate(zip(_running(layer, place), states[place])):
            torch.testing.assert_close(m, m_ref, rtol=1e-10, atol=1e-10, msg=f"{place} step {t}")
            torch.testing.assert_close(v, v_ref, rtol=1e-10, atol=1e-10, msg=f"{place} step {t}")
    layer.eval()
    long_seq = torch.randn(3, 8, 6, dtype=torch.float64)
    ref = _eq6_reference(layer, long_seq, torch.full((3,), 8), states, training=False)
    torch.testing.assert_close(layer(long_seq), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("norm,options", [("bn", {}), ("bn", {"masked": False}), ("brn", {})])
@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_eval_shortcut_equals_each_steps_own_layer(cell, norm, options, monkeypatch):
    """Reference: the per-step norm modules' own forward (their sequence path with the padding mask). At
    test time StepNorm applies a BatchNorm's (or Batch Renorm's) running statistics directly; the outputs,
    padded positions included, must be the same numbers (to rounding: the kernel vectorizes the gathered
    rows differently), past the trained steps too."""
    layer = _layer(cell, norm, **options)
    for batch in range(2):
        seq = torch.randn(4, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(batch))
        layer(seq, torch.arange(5) < torch.tensor([5, 3, 5, 2])[:, None])
    layer.eval()
    seq = torch.randn(4, 8, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    mask = torch.arange(8) < torch.tensor([8, 3, 6, 1])[:, None]
    fast = layer(seq, mask)
    assert any(getattr(m, "running_affine", False) for m in layer.modules())  # the shortcut was taken
    for m in layer.modules():  # the norms' own forward instead
        if getattr(m, "running_affine", False):
            monkeypatch.setattr(m, "running_affine", False)
    torch.testing.assert_close(fast, layer(seq, mask), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_recurrent_bn_parameters_are_cooijmans(cell):
    """Reference: Cooijmans et al., section 5 and eq. (6): every gamma starts at 0.1; BN_x and BN_h have no
    beta, one bias b (zeros) on their sum; BN_c keeps its beta; W_x carries no bias (BN would cancel it)."""
    layer = cells.recurrent_layer(cell, 4, 8, norms.factory("bn"), "recurrent")
    gates = cells.GATES[cell] * 8
    for norm in (layer.norm_x, layer.norm_h) + ((layer.norm_c,) if cell == "lstm" else ()):
        assert torch.all(norm.norm.weight == 0.1)
    assert layer.norm_x.norm.bias is None and layer.norm_h.norm.bias is None
    assert layer.ih.bias is None and layer.hh.bias is None
    assert layer.bias.shape == (gates,) and torch.all(layer.bias == 0)
    if cell == "lstm":
        assert layer.norm_c.norm.bias.shape == (8,)
    layer(torch.randn(3, 4, 4))  # the later steps' copies drop beta too, and share gamma
    assert all(s.bias is None and s.weight is layer.norm_x.norm.weight for s in layer.norm_x.steps)


def test_no_dead_bias_before_a_norm_with_a_shift():
    """Reference: the cells' equations (cells.py): W_x's bias is removed where the norm after it has a shift
    (ln, gn: Ba et al.'s shift is the bias), kept before rms, which has none; LN-LSTM's gains start at 1."""
    for norm, has_bias in (("ln", False), ("gn", False), ("rms", True)):
        for cell in ("rnn", "lstm"):
            layer = cells.recurrent_layer(cell, 4, 16, norms.factory(norm), "recurrent")
            assert (layer.ih.bias is not None) == has_bias and layer.bias is None, (norm, cell)
    ln = cells.recurrent_layer("lstm", 4, 8, norms.factory("ln"), "recurrent")
    assert torch.all(ln.norm_x.norm.norm.weight == 1)


def test_samples_per_step_counts_the_real_samples_each_steps_statistics_took():
    """Reference: counting by hand: two batches with lengths [5, 3, 5, 2] give 2 x (samples with length > t)
    at step t; eval adds nothing; the count survives a state dict round trip."""
    layer = _layer("lstm", dtype=torch.float32)
    lengths = torch.tensor([5, 3, 5, 2])
    mask = torch.arange(5) < lengths[:, None]
    for _ in range(2):
        layer(torch.randn(4, 5, 6), mask)
    layer.eval()
    layer(torch.randn(4, 5, 6), mask)
    assert cells.samples_per_step(layer) == [8, 8, 6, 4, 4]
    fresh = _layer("lstm", dtype=torch.float32)
    fresh.load_state_dict(layer.state_dict())
    assert cells.samples_per_step(fresh) == [8, 8, 6, 4, 4]
    assert cells.samples_per_step(_layer("lstm", "ln")) is None


def test_recurrent_bn_statistics_survive_a_state_dict_round_trip():
    """Reference: the trained layer itself: a fresh layer loading its state dict gets every step back, and a
    layer that trained on longer sequences goes back to the saved steps."""
    layer = _layer("lstm")
    layer(torch.randn(4, 6, 6, dtype=torch.float64))
    fresh = _layer("lstm")
    assert fresh.norm_x.trained_steps == 1
    saved_short = {k: v.clone() for k, v in fresh.state_dict().items()}
    fresh.load_state_dict(layer.state_dict())
    assert fresh.norm_x.trained_steps == fresh.norm_c.trained_steps == 6
    layer.eval(), fresh.eval()
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    torch.testing.assert_close(fresh(x), layer(x))
    # The step copies share step 0's scale and shift: one set of learnable parameters per place in the cell.
    assert all(step.weight is fresh.norm_x.norm.weight for step in fresh.norm_x.steps)
    assert len(list(fresh.parameters())) == len(list(_layer("lstm").parameters()))
    fresh.load_state_dict(saved_short)
    assert fresh.norm_x.trained_steps == 1 and cells.samples_per_step(fresh) == [0]


def _ln(x, gamma, beta):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, EPS)


def test_ln_lstm_matches_ba_et_al():
    """Reference: Ba et al. 2016, supplementary (LN-LSTM): gates = LN(W_h h) + LN(W_x x) + b;
    c_t = sig(f) c + sig(i) tanh(g); h_t = sig(o) tanh(LN(c_t)), each LN with its own gain and bias (the two
    LNs' biases are b)."""
    layer = _layer("lstm", "ln", dtype=torch.float32)
    seq = torch.randn(3, 4, 6)
    h = c = torch.zeros(3, 5)
    nx, nh, nc = layer.norm_x.norm.norm, layer.norm_h.norm.norm, layer.norm_c.norm.norm  # TokenWise(LayerNorm)
    outs = []
    for t in range(4):
        gates = _ln(seq[:, t] @ layer.ih.weight.T, nx.weight, nx.bias) + _ln(
            h @ layer.hh.weight.T, nh.weight, nh.bias)
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(_ln(c, nc.weight, nc.bias))
        outs.append(h)
    torch.testing.assert_close(layer(seq), torch.stack(outs, 1))
    assert layer.norm_x.trained_steps == 0  # batch-independent: one module for every step


def test_ln_rnn_matches_ba_et_al_eq4():
    """Reference: Ba et al. 2016, eq. (4): h_t = tanh(g / sigma_t (a_t - mu_t) + b), a_t = W_hh h + W_xh x."""
    layer = _layer("rnn", "ln", dtype=torch.float32)
    seq = torch.randn(3, 4, 6)
    ln = layer.norm_h.norm.norm
    h, outs = torch.zeros(3, 5), []
    for t in range(4):
        h = torch.tanh(_ln(seq[:, t] @ layer.ih.weight.T + h @ layer.hh.weight.T, ln.weight, ln.bias))
        outs.append(h)
    torch.testing.assert_close(layer(seq), torch.stack(outs, 1))


RECURRENT = [n for n in norms.names() if "flat" in norms.get(n).layouts and not norms.get(n).own_activation]


@pytest.mark.parametrize("norm", RECURRENT)
@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_recurrent_placement_in_the_rnn_model(norm, cell):
    """Reference: the model's contract (models.py): logits (N, 10), finite gradients, and with lengths the
    logits of a padded sequence equal those of the same sequence alone (eval)."""
    torch.manual_seed(0)
    cfg = ModelConfig(name="rnn", hidden=16, depth=2, cell=cell, placement="recurrent")
    net = models.create(cfg, norms.factory(norm), (1, 12, 12), 10)
    x = torch.randn(4, 1, 12, 12)
    lengths = torch.tensor([12, 7, 9, 12])
    net(x, lengths).logsumexp(1).mean().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    net.eval()
    torch.testing.assert_close(net(x, lengths)[1:2], net(x[1:2, :, :7]), atol=1e-5, rtol=1e-5)


def test_recurrent_placement_refuses_what_it_cannot_do():
    """Reference: docs/design.md: impossible combinations fail before any data is read (`models.validate`,
    the runner's setup) with why and what instead; unknown cells and placements fail at composition
    (config.RNNCell, config.Placement; test_reliability.py)."""
    def rnn(cell, norm):
        models.validate(ModelConfig(name="rnn", cell=cell, placement="recurrent"), norms.factory(norm))

    with pytest.raises(UserError, match="in cannot go inside a recurrent cell.*not defined.*placement=output"):
        rnn("rnn", "in")
    with pytest.raises(UserError, match="frn includes its own activation.*placement=output"):
        rnn("lstm", "frn")
    with pytest.raises(UserError, match="not gru.*model.cell=rnn or lstm"):
        rnn("gru", "ln")
    rnn("lstm", "bn")  # recurrent BN (Cooijmans et al.) goes together


@pytest.mark.parametrize("norm", ["wn", "cn"])
@pytest.mark.parametrize("cell", cells.CELLS)
def test_reparameterizing_norms_build_the_recurrent_matrices(norm, cell):
    """Reference: the norm's own layer builders: WN/CN change W_x and W_h of every cell, GRU included."""
    layer = cells.recurrent_layer(cell, 4, 8, norms.factory(norm), "output")
    assert isinstance(layer, cells.SteppedRecurrent)
    assert layer.ih.normbench_norm == layer.hh.normbench_norm == (norm, "layer")  # made by the norm's builder
    assert layer(torch.randn(2, 5, 4)).shape == (2, 5, 8)
