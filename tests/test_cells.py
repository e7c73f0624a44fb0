"""The RNN's recurrent placement (cells.py) against step-by-step references written from the papers:
recurrent BN with statistics per time step (Cooijmans et al. 2016) and LN-LSTM (Ba et al. 2016)."""

import pytest
import torch
import torch.nn.functional as F

from normbench import cells, models, norms
from normbench.config import ModelConfig
from normbench.errors import UserError

EPS = 1e-5


def _layer(cell, norm="bn", inp=6, hidden=5, **options):
    torch.manual_seed(0)
    layer = cells.recurrent_layer(cell, inp, hidden, norms.factory(norm, **options), "recurrent")
    with torch.no_grad():  # non-trivial scales and shifts, shared by every step
        for name, p in layer.named_parameters():
            if name.endswith(("norm.weight", "norm.norm.weight")):
                p.uniform_(0.5, 1.5)
            elif name.endswith(("norm.bias", "norm.norm.bias")):
                p.uniform_(-0.5, 0.5)
    return layer


def _bn_rnn_reference(layer, seq, lengths, running=None):
    """Cooijmans et al. applied to Ba's eq. (4): a_t = W_x x_t + b + W_h h_{t-1};
    h_t = tanh(gamma (a_t - mu_t) / sqrt(var_t + eps) + beta), mu_t and var_t over the samples still running
    at t (training), or step t's running statistics, the last trained step's past it (`running`)."""
    w_x, b, w_h = layer.ih.weight, layer.ih.bias, layer.hh.weight
    gamma, beta = layer.norm_h.norm.weight, layer.norm_h.norm.bias
    h = seq.new_zeros(seq.shape[0], w_h.shape[1])
    outs, stats = [], []
    for t in range(seq.shape[1]):
        a = seq[:, t] @ w_x.T + b + h @ w_h.T
        real = lengths > t
        if running is None:
            mu, var = a[real].mean(0), a[real].var(0, correction=0)
            stats.append((mu, a[real].var(0, correction=1)))
        else:
            mu, var = running[min(t, len(running) - 1)]
        h = torch.where(real[:, None], torch.tanh(gamma * (a - mu) / torch.sqrt(var + EPS) + beta), torch.zeros_like(a))
        outs.append(h)
    return torch.stack(outs, 1), stats


def test_recurrent_bn_keeps_statistics_per_step_and_uses_the_last_past_them():
    """Reference: Cooijmans et al., section 4: separate statistics per time step; for steps beyond the
    longest training sequence, the statistics of the last one."""
    layer = _layer("rnn", momentum=1.0)  # running statistics = the last batch's, to compare exactly
    seq = torch.randn(4, 5, 6) * 2
    lengths = torch.tensor([5, 3, 5, 2])
    mask = torch.arange(5) < lengths[:, None]
    out = layer(seq, mask)
    ref, stats = _bn_rnn_reference(layer, seq, lengths)
    torch.testing.assert_close(out[mask], ref[mask])
    assert layer.norm_h.trained_steps == 5
    for t, (mu, var) in enumerate(stats):
        step = layer.norm_h.at(t)
        torch.testing.assert_close(step.running_mean, mu)
        torch.testing.assert_close(step.running_var, var)
    means = torch.stack([layer.norm_h.at(t).running_mean for t in range(5)])
    assert torch.cdist(means, means).triu(1)[torch.triu_indices(5, 5, 1).unbind()].min() > 1e-3  # all differ

    layer.eval()
    long_seq = torch.randn(3, 8, 6)
    all_real = torch.full((3,), 8)
    running = [(mu, var) for mu, var in stats]
    ref, _ = _bn_rnn_reference(layer, long_seq, all_real, running)
    torch.testing.assert_close(layer(long_seq), ref)


def test_bn_lstm_gamma_starts_at_one_tenth():
    """Reference: Cooijmans et al., section 5: BN-LSTM initializes every gamma to 0.1; LN-LSTM (Ba et al.)
    keeps its gains at 1."""
    bn = cells.recurrent_layer("lstm", 4, 8, norms.factory("bn"), "recurrent")
    for norm in (bn.norm_x, bn.norm_h, bn.norm_c):
        assert torch.all(norm.norm.weight == 0.1)
    ln = cells.recurrent_layer("lstm", 4, 8, norms.factory("ln"), "recurrent")
    assert torch.all(ln.norm_x.norm.norm.weight == 1)


def test_recurrent_bn_statistics_survive_a_state_dict_round_trip():
    """Reference: the trained layer itself: a fresh layer loading its state dict gets every step back."""
    layer = _layer("lstm")
    layer(torch.randn(4, 6, 6))
    fresh = _layer("lstm")
    assert fresh.norm_x.trained_steps == 1
    fresh.load_state_dict(layer.state_dict())
    assert fresh.norm_x.trained_steps == fresh.norm_c.trained_steps == 6
    layer.eval(), fresh.eval()
    x = torch.randn(2, 9, 6)
    torch.testing.assert_close(fresh(x), layer(x))
    # The step copies share step 0's scale and shift: one set of learnable parameters per place in the cell.
    assert all(step.weight is fresh.norm_x.norm.weight for step in fresh.norm_x.steps)
    assert len(list(fresh.parameters())) == len(list(_layer("lstm").parameters()))


def _ln(x, gamma, beta):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, EPS)


def test_ln_lstm_matches_ba_et_al():
    """Reference: Ba et al. 2016, supplementary (LN-LSTM): gates = LN(W_h h) + LN(W_x x) + b;
    c_t = sig(f) c + sig(i) tanh(g); h_t = sig(o) tanh(LN(c_t)), each LN with its own gain and bias."""
    layer = _layer("lstm", "ln")
    seq = torch.randn(3, 4, 6)
    h = c = torch.zeros(3, 5)
    nx, nh, nc = layer.norm_x.norm.norm, layer.norm_h.norm.norm, layer.norm_c.norm.norm  # TokenWise(LayerNorm)
    outs = []
    for t in range(4):
        gates = _ln(seq[:, t] @ layer.ih.weight.T + layer.ih.bias, nx.weight, nx.bias) + _ln(
            h @ layer.hh.weight.T, nh.weight, nh.bias)
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(_ln(c, nc.weight, nc.bias))
        outs.append(h)
    torch.testing.assert_close(layer(seq), torch.stack(outs, 1))
    assert layer.norm_x.trained_steps == 0  # batch-independent: one module for every step


def test_ln_rnn_matches_ba_et_al_eq4():
    """Reference: Ba et al. 2016, eq. (4): h_t = tanh(g / sigma_t (a_t - mu_t) + b), a_t = W_hh h + W_xh x."""
    layer = _layer("rnn", "ln")
    seq = torch.randn(3, 4, 6)
    ln = layer.norm_h.norm.norm
    h, outs = torch.zeros(3, 5), []
    for t in range(4):
        h = torch.tanh(_ln(seq[:, t] @ layer.ih.weight.T + layer.ih.bias + h @ layer.hh.weight.T, ln.weight, ln.bias))
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
    """Reference: DESIGN.md: impossible combinations fail at build with why and what instead."""
    with pytest.raises(UserError, match="in cannot go inside a recurrent cell.*not defined.*placement=output"):
        cells.recurrent_layer("rnn", 4, 8, norms.factory("in"), "recurrent")
    with pytest.raises(UserError, match="frn includes its own activation.*placement=output"):
        cells.recurrent_layer("lstm", 4, 8, norms.factory("frn"), "recurrent")
    with pytest.raises(UserError, match="not gru.*model.cell=rnn or lstm"):
        cells.recurrent_layer("gru", 4, 8, norms.factory("ln"), "recurrent")
    with pytest.raises(UserError, match="unknown norm placement"):
        cells.recurrent_layer("rnn", 4, 8, norms.factory("ln"), "inside")
    with pytest.raises(UserError, match="unknown RNN cell"):
        cells.recurrent_layer("tcn", 4, 8, norms.factory("ln"))


@pytest.mark.parametrize("norm", ["wn", "cn"])
@pytest.mark.parametrize("cell", cells.CELLS)
def test_reparameterizing_norms_build_the_recurrent_matrices(norm, cell):
    """Reference: the norm's own layer builders: WN/CN change W_x and W_h of every cell, GRU included."""
    layer = cells.recurrent_layer(cell, 4, 8, norms.factory(norm), "output")
    assert isinstance(layer, cells.SteppedRecurrent)
    assert layer.ih.normbench_norm == layer.hh.normbench_norm == (norm, "layer")  # made by the norm's builder
    assert layer(torch.randn(2, 5, 4)).shape == (2, 5, 8)
