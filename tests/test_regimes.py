"""What the studies add to a run (normbench/regimes/, via the runner): the effective learning rate, the
values each norm's statistics see (models.norm_values_per_channel), the batch-statistics test accuracy,
the variable-length evaluations, and a results.json even when setup fails."""

import json
from dataclasses import replace

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from normbench import data, models, norms
from normbench.config import ModelConfig, VarLenConfig
from normbench.data import batches
from normbench.errors import UserError
from normbench.regimes import default, precise_bn
from normbench.runner import run


@pytest.mark.parametrize("model, expected", [
    (ModelConfig(name="mlp", hidden=16), 4),  # a linear layer's BN averages over the batch alone
    (ModelConfig(name="cnn", channels=[8, 16], hidden=16), 4 * 14 * 14),  # the 2nd conv stage sees 14x14
    (ModelConfig(name="rnn", hidden=16), 4 * 28),  # a sequence norm averages over batch x time
])
def test_values_per_channel(model, expected):
    """Reference: batch for linear layers, batch x H x W for the smallest conv feature map, batch x T for
    a sequence, counted by hand for a batch of 4 FashionMNIST-sized images."""
    net = models.create(model, norms.factory("bn"), (1, 28, 28), 10)
    net.train()
    values, layouts = models.norm_values_per_channel(net, torch.randn(4, 1, 28, 28))
    assert values == expected
    assert layouts == {"flat"} if model.name == "mlp" else layouts  # the layouts the guard suggests norms for
    assert net.training  # the probe ran in eval mode and gave the mode back
    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert bns and all(m.num_batches_tracked == 0 for m in bns)  # no running-statistics update


def test_batch_statistics_evaluation_restores_the_model(tiny_cfg):
    """Reference: the model's state before the batch-statistics evaluation (training mode updates BN's
    running statistics; the reported test_acc must not depend on evaluation order), and the accuracy
    counted by hand with each test batch normalized by its own mean and variance."""
    splits = data.load(tiny_cfg.data, torch.device("cpu"))
    net = models.create(replace(tiny_cfg.model, dropout=0.5), norms.factory("bn"), splits.shape, 10).eval()
    for m in net.modules():  # running statistics far from any batch's, so the two modes must differ
        if isinstance(m, _BatchNorm):
            m.running_mean.fill_(3.0)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    out = default.evaluations(net, splits, tiny_cfg)
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not net.training
    hits = 0
    with torch.no_grad():
        for x, y, _ in batches(splits.test_x, splits.test_y, tiny_cfg.batch_size, drop_last=True):
            h = net.net[0](x)
            for layer in net.net[1:]:
                if isinstance(layer, _BatchNorm):  # by hand: the batch's own (biased) statistics
                    h = (h - h.mean(0)) / torch.sqrt(h.var(0, unbiased=False) + layer.eps) * layer.weight + layer.bias
                elif not isinstance(layer, torch.nn.Dropout):
                    h = layer(h)
            hits += (h.argmax(1) == y).sum().item()
    n = len(splits.test_x) - len(splits.test_x) % tiny_cfg.batch_size
    assert out["test_acc_train_mode"] == [pytest.approx(hits / n, abs=1e-12)]  # one member's


def test_layer_norm_is_the_same_in_train_and_eval(tiny_cfg, tmp_path):
    """Reference: LN has no batch statistics, so its test accuracy with norms in training mode (dropout
    off) equals the eval-mode one exactly, on the same test set cut to whole training batches."""
    cfg = replace(tiny_cfg, norm=replace(tiny_cfg.norm, name="ln"), batch_size=20, lr_scaling="linear")
    res = run(cfg, tmp_path / "ln")
    assert res["status"] == "completed"
    assert res["test_acc_train_mode"] == res["test_acc"]  # 200 test samples = 10 batches of 20
    assert res["lr_effective"] == pytest.approx(cfg.lr * 20 / 64)
    assert res["norm_values_per_channel"] == 20 and res["batch_dependent"] is False


def test_variable_length_run_records_every_test(tiny_cfg, tmp_path):
    """Reference: docs/design.md's variable-length study: accuracy per test length (inside the trained range
    and longer), on mixed lengths, and under heavy padding, each also with batch statistics."""
    cfg = replace(tiny_cfg, model=ModelConfig(name="rnn", hidden=16), norm=replace(tiny_cfg.norm, masked=False),
                  varlen=VarLenConfig(enabled=True, min_len=10, max_len=20, test_lengths=[10, 20, 30]))
    res = run(cfg, tmp_path / "vl")
    assert res["status"] == "completed"
    assert set(res["test_acc_by_length"]) == {"10", "20", "30"}
    for key in ("test_acc_mixed", "test_acc_heavy_pad", "test_acc_mixed_train_mode",
                "test_acc_heavy_pad_train_mode", "test_acc_train_mode"):
        assert 0 <= res[key] <= 1, key
    # Running statistics and a causal RNN: extra padding after the last real step changes nothing.
    assert res["test_acc_heavy_pad"] == res["test_acc_mixed"]


def test_stretched_precise_bn_reestimates_recurrent_steps_past_the_trained_length(tiny_cfg, tmp_path):
    """Reference: PreciseBN by hand on a copy of the trained recurrent-BN RNN: training images resized to
    each length >= max_len, every step up to it given statistics of its own (precise_bn.recompute_statistics
    with steps=L), then the test set at that length. The run's own model (test_acc_by_length) is untouched,
    and `none` has no such key (nothing to re-estimate)."""
    from normbench.data import varlen
    from normbench.regimes import variable_length
    from normbench.train.evaluate import evaluate

    vl = VarLenConfig(enabled=True, min_len=6, max_len=10, test_lengths=[8, 10, 14])
    cfg = replace(tiny_cfg, model=ModelConfig(name="rnn", hidden=16, placement="recurrent"), varlen=vl,
                  batch_size=10)
    splits = data.load(cfg.data, torch.device("cpu"))
    torch.manual_seed(0)
    net = models.create(cfg.model, norms.factory("bn"), splits.shape, 10)
    net.train()
    for x, y, lengths in variable_length.train_batches(cfg)(splits.train_x, splits.train_y, 10, shuffle=True,
                                                            generator=torch.Generator().manual_seed(0)):
        net(x, lengths)  # running statistics for steps 0..9 (no optimizer: the weights stay as built)
    net.eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    out = variable_length.evaluations(net, splits, cfg)
    assert set(out["test_acc_by_length_precise_bn"]) == {"10", "14"}
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())
    import copy

    for length in (10, 14):
        by_hand = copy.deepcopy(net)
        gen = torch.Generator().manual_seed(cfg.seed)
        stretched = ((varlen.resize_rows(x, length), y, torch.full((len(x),), length))
                     for x, y, _ in batches(splits.train_x, splits.train_y, 10, shuffle=True, generator=gen,
                                            drop_last=True))
        done = precise_bn.recompute_statistics(by_hand, stretched, steps=length)
        assert done.samples == len(splits.train_x) // 10 * 10
        cells = [m for m in by_hand.modules() if getattr(m, "per_step", False)]
        assert cells and all(m.trained_steps == length for m in cells)
        want = evaluate(by_hand, varlen.length_batches(splits.test_x, splits.test_y, length, cfg.eval_batch_size)).acc
        assert out["test_acc_by_length_precise_bn"][str(length)] == want
    plain = models.create(cfg.model, norms.factory("none"), splits.shape, 10).eval()
    assert "test_acc_by_length_precise_bn" not in variable_length.evaluations(plain, splits, cfg)


def test_varlen_needs_the_rnn(tiny_cfg, tmp_path):
    """Reference: the CLI's one-line user error, and a results.json with status failed for summarize."""
    cfg = replace(tiny_cfg, varlen=VarLenConfig(enabled=True))
    with pytest.raises(UserError, match="model=rnn"):
        run(cfg, tmp_path / "bad")
    res = json.loads((tmp_path / "bad" / "results.json").read_text())
    assert res["status"] == "failed" and "model=rnn" in res["error"]


def test_ghost_batch_run_records_its_values_and_the_statistics_suite(tiny_cfg, tmp_path):
    """Reference: a BN run at batch 16 with ghost batches of 2 averages 2 values per channel in an MLP
    (the ghost batch, not the SGD batch); its results hold PreciseBN's accuracy, recomputed on a copy
    (test_acc, from the running statistics, is that of the model as trained), and the training-set
    accuracies; LN, without running statistics, records null for PreciseBN."""
    cfg = replace(tiny_cfg, norm=replace(tiny_cfg.norm, ghost_batch=2), max_steps=20)
    res = run(cfg, tmp_path / "ghost")
    assert res["status"] == "completed" and res["norm_values_per_channel"] == 2
    for key in ("test_acc_precise_bn", "train_acc", "train_acc_train_mode", "test_acc_train_mode"):
        assert isinstance(res[key], float), key
    ln = run(replace(tiny_cfg, norm=replace(tiny_cfg.norm, name="ln")), tmp_path / "ln")
    assert ln["test_acc_precise_bn"] is None
    assert ln["train_acc"] == ln["train_acc_train_mode"]  # no batch statistics: the two modes agree
    with pytest.raises(UserError, match="does not divide batch_size=16"):
        run(replace(tiny_cfg, norm=replace(tiny_cfg.norm, ghost_batch=3)), tmp_path / "bad")


@pytest.mark.parametrize("model,norm,opts", [("mlp", "bn", {}), ("cnn", "in", {}), ("mlp", "sn", {}),
                                             ("cnn", "bn", {"ghost_batch": 2}), ("rnn", "bn", {"recurrent": True}),
                                             ("mlp", "ln", {})])
def test_batch_statistics_over_large_batches_split_in_groups_equal_small_batches(model, norm, opts, tiny_cfg):
    """Reference: evaluate.evaluate over batches of the training batch size (4). The evaluation suite instead
    passes batches of 200 with each group of 4 normalized on its own (split_statistics): the same loss and
    accuracy in float64, for every batch-dependent norm, ghost batches and per-step recurrent BN included;
    and PreciseBN recomputed over large split batches gives the statistics it gives over small ones. Batch
    Renorm cannot split (its output reads running statistics that each batch moves) and is left alone."""
    import copy

    from normbench import data, models, norms
    from normbench.config import ModelConfig
    from normbench.regimes import precise_bn
    from normbench.train.evaluate import evaluate
    from normbench.train.norm_modes import can_split_statistics, split_statistics

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        recurrent = opts.pop("recurrent", False)
        mcfg = ModelConfig(name=model, hidden=16, **({"placement": "recurrent"} if recurrent else {}))
        torch.manual_seed(0)
        net = models.create(mcfg, norms.factory(norm, **opts), (1, 28, 28), 10)
        norms.set_total_steps(net, 3)  # Batch Renorm's schedule done by the evaluations, as after a run
        splits = data.load(tiny_cfg.data, torch.device("cpu"))
        x, y = splits.test_x[:200], splits.test_y[:200]
        for _ in range(3):  # running statistics away from their initial values
            net.train()(splits.train_x[:8])
        assert can_split_statistics(net)
        torch.manual_seed(0)
        brn = models.create(mcfg, norms.factory("brn"), (1, 28, 28), 10)
        assert not can_split_statistics(brn)
        small = evaluate(net, data.batches(x, y, 4), batch_stats=True)
        large = evaluate(net, data.batches(x, y, 200), batch_stats=True, stats_per=4)
        assert large.loss[0] == pytest.approx(small.loss[0], abs=1e-10) and large.acc == small.acc
        if precise_bn.has_running_stats(net):
            a, b = copy.deepcopy(net), copy.deepcopy(net)
            precise_bn.recompute_statistics(a, data.batches(splits.train_x[:96], splits.train_y[:96], 4), 96)
            with split_statistics(b, 4):
                precise_bn.recompute_statistics(b, data.batches(splits.train_x[:96], splits.train_y[:96], 48), 96)
            for (k, u), v in zip(a.state_dict().items(), b.state_dict().values()):
                if u.is_floating_point():
                    torch.testing.assert_close(u, v, rtol=0, atol=1e-10, msg=k)
    finally:
        torch.set_default_dtype(old)
