"""PreciseBN (Wu & Johnson 2021, arXiv 2105.07576): population statistics recomputed with frozen weights,
checked against the same statistics recomputed by hand, layer by layer, in float64."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normbench import norms
from normbench.models import cells
from normbench.regimes import precise_bn

EPS = 1e-5
TIGHT = {"rtol": 1e-10, "atol": 1e-10}


def _population(rows):
    """Mean and biased variance over every row: the population statistics of what a layer saw."""
    rows = torch.cat(rows)
    return rows.mean(0), rows.var(0, correction=0)


def _batch_norm(h, weight, bias, group):
    """Training-mode BN of (N, C) rows by hand, each group of `group` consecutive rows by its own statistics."""
    g = h.reshape(-1, group, h.shape[1])
    y = (g - g.mean(1, keepdim=True)) / torch.sqrt(g.var(1, correction=0, keepdim=True) + EPS)
    return (y * weight + bias).reshape(h.shape)


def _mlp(norm="bn", **options):
    torch.manual_seed(0)
    make = norms.factory(norm, **options)
    return nn.Sequential(nn.Linear(6, 8), make(8, "flat"), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(8, 5), make(5, "flat"), nn.ReLU(), nn.Linear(5, 3)).double()


def _train_a_little(model, x):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(5):
        loss = model(x[i * 16:(i + 1) * 16]).square().mean()
        opt.zero_grad(), loss.backward(), opt.step()


@pytest.mark.parametrize("ghost_batch", [None, 4])
def test_precise_bn_equals_population_statistics_by_hand(ghost_batch):
    """Reference: each layer's population mean and variance over every value it saw, recomputed by hand:
    batches of 16 (ghost batches of 4) through the frozen layers, dropout off, BN normalizing by batch
    statistics; 112 samples (7 whole batches) for num_samples=100. Weights, other buffers and modes unchanged."""
    x = torch.randn(160, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2 + 1
    model = _mlp(ghost_batch=ghost_batch)
    _train_a_little(model, x)
    model.train()
    params = {k: v.clone() for k, v in model.named_parameters()}
    tracked = [model[1].num_batches_tracked.clone(), model[5].num_batches_tracked.clone()]
    report = precise_bn.recompute_statistics(model, ((x[i:i + 16], None, None) for i in range(0, 160, 16)), 100)
    assert report == precise_bn.Recomputed(layers=2, samples=112)

    lin1, bn1, lin2, bn2 = model[0], model[1], model[4], model[5]
    group = ghost_batch or 16
    seen1, seen2 = [], []
    for i in range(0, 112, 16):
        h1 = lin1(x[i:i + 16])
        seen1.append(h1)
        h2 = lin2(F.relu(_batch_norm(h1, bn1.weight, bn1.bias, group)))
        seen2.append(h2)
    for bn, seen in ((bn1, seen1), (bn2, seen2)):
        mean, var = _population(seen)
        torch.testing.assert_close(bn.running_mean, mean, **TIGHT)
        torch.testing.assert_close(bn.running_var, var, **TIGHT)
    assert all(torch.equal(p, params[k]) for k, p in model.named_parameters())
    assert [model[1].num_batches_tracked, model[5].num_batches_tracked] == tracked
    assert model.training and all(m.training for m in model.modules())


@pytest.mark.parametrize("name", ["brn", "sn", "bn_scratch"])
def test_precise_bn_reaches_every_norm_with_running_statistics(name):
    """Reference: the population statistics of the first norm layer's input, by hand (they do not depend on
    how the layer normalizes); Batch Renorm's step clock is restored."""
    x = torch.randn(64, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 3 - 2
    model = _mlp("bn", impl="scratch") if name == "bn_scratch" else _mlp(name)
    norms.set_total_steps(model, 10)
    _train_a_little(model, torch.cat([x, x]))
    clock = getattr(model[1], "step", torch.tensor(0)).clone()
    precise_bn.recompute_statistics(model, ((x[i:i + 8],) for i in range(0, 64, 8)))
    mean, var = _population([model[0](x)])
    torch.testing.assert_close(model[1].running_mean, mean, **TIGHT)
    torch.testing.assert_close(model[1].running_var, var, **TIGHT)
    assert torch.equal(getattr(model[1], "step", torch.tensor(0)), clock)


def test_masked_seq_bn_counts_real_tokens_only():
    """Reference: population statistics over the real tokens of every batch (padding excluded), by hand."""
    g = torch.Generator().manual_seed(2)
    bn = norms.create("bn", 4, "seq").double()
    x = torch.randn(24, 7, 4, dtype=torch.float64, generator=g) + 3
    mask = torch.arange(7) < torch.randint(1, 8, (24,), generator=g)[:, None]

    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = bn

        def forward(self, x, mask):
            return self.bn(x, mask)

    precise_bn.recompute_statistics(Seq(), ((x[i:i + 6], None, mask[i:i + 6]) for i in range(0, 24, 6)))
    mean, var = _population([x[mask]])
    torch.testing.assert_close(bn.running_mean, mean, **TIGHT)
    torch.testing.assert_close(bn.running_var, var, **TIGHT)


def test_recurrent_bn_gets_each_steps_population_statistics():
    """Reference: BN_x's input at step t is W_x x_t, whatever the cell did before, so each step's population
    statistics are those of x_t W_x^T over the samples still running at t. A step past the trained ones adds
    nothing to the last step's; steps=T gives the later steps statistics of their own."""
    torch.manual_seed(0)
    layer = cells.recurrent_layer("lstm", 3, 4, norms.factory("bn"), "recurrent").double()
    layer(torch.randn(8, 5, 3, dtype=torch.float64))  # trains steps 0-4
    samples = cells.samples_per_step(layer)
    g = torch.Generator().manual_seed(3)
    seq = torch.randn(16, 7, 3, dtype=torch.float64, generator=g) * 2 + 1
    lengths = torch.randint(1, 8, (16,), generator=g)
    lengths[0] = 7

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x, lengths):
            return self.layer(x, torch.arange(x.shape[1]) < lengths[:, None])

    def expected(t):
        real = lengths > t
        return _population([seq[real, t] @ layer.ih.weight.T])

    batches = [(seq[i:i + 8], None, lengths[i:i + 8]) for i in (0, 8)]
    precise_bn.recompute_statistics(Wrap(), batches)
    assert layer.norm_x.trained_steps == 5 and cells.samples_per_step(layer) == samples
    for t in range(5):  # step 4 took only step 4's values, not steps 5 and 6 which reused it
        mean, var = expected(t)
        torch.testing.assert_close(layer.norm_x.at(t).running_mean, mean, **TIGHT, msg=f"step {t}")
        torch.testing.assert_close(layer.norm_x.at(t).running_var, var, **TIGHT, msg=f"step {t}")
    precise_bn.recompute_statistics(Wrap(), batches, steps=7)
    assert layer.norm_x.trained_steps == 7
    for t in range(7):
        torch.testing.assert_close(layer.norm_x.at(t).running_mean, expected(t)[0], **TIGHT, msg=f"step {t}")
    assert torch.all(layer.norm_h.at(0).running_mean == 0)  # h_0 = 0: W_h h_0 is 0 for every sample


def test_has_running_stats_and_nothing_to_do_without_them():
    """Reference: the catalog's batch dependence: bn keeps running statistics, ln and gn none; a model without
    them is left alone (results.json: null)."""
    assert precise_bn.has_running_stats(_mlp("bn"))
    for name in ("ln", "gn", "none"):
        model = _mlp(name, **({"groups": 1} if name == "gn" else {}))
        assert not precise_bn.has_running_stats(model)
        assert precise_bn.recompute_statistics(model, [(torch.randn(4, 6, dtype=torch.float64),)]) == \
            precise_bn.Recomputed(layers=0, samples=0)
