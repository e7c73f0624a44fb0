"""Evaluation that costs little computes the same numbers: the passes a model's norms make equal by
construction (batch statistics of batch-free norms, padding past a causal RNN's last real step or behind a
Transformer's mask, masked statistics at any padding) are derived from the passes that equal them; the
reference is the full suite with every pass run, in float64."""

from dataclasses import replace

import pytest
import torch

from normbench import data, models, norms
from normbench.config import ModelConfig, VarLenConfig
from normbench.data import varlen
from normbench.regimes import default, variable_length
from normbench.train.norm_modes import batch_statistics


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def _full_suite(monkeypatch):
    """The suite with no pass derived: every number from a pass of its own (today's reference)."""
    monkeypatch.setattr(default, "batch_free", lambda model: False)
    monkeypatch.setattr(variable_length, "per_token", lambda model, names: False)
    monkeypatch.setattr(variable_length, "masks_padding", lambda model: False)


def _numbers(out: dict) -> dict:
    return {k: v for k, v in out.items() if k != "eval_derived"}


@pytest.mark.parametrize("norm, derived", [("ln", True), ("gn", True), ("none", True), ("bn", False)])
def test_small_batch_suite_unchanged(tiny_cfg, float64, monkeypatch, norm, derived):
    """Reference: the full suite on the same trained-from-init model in float64: a batch-free model's
    test_acc_train_mode and train_acc_train_mode come from the eval-mode passes and equal the passes they
    replace exactly; a BN model runs them (nothing derived)."""
    splits = data.load(tiny_cfg.data, torch.device("cpu"))
    torch.manual_seed(0)
    net = models.create(tiny_cfg.model, norms.factory(norm), splits.shape, 10).eval()
    cheap = default.evaluations(net, splits, replace(tiny_cfg, batch_size=7))
    assert ("eval_derived" in cheap) == derived
    with monkeypatch.context() as m:
        _full_suite(m)
        full = default.evaluations(net, splits, replace(tiny_cfg, batch_size=7))
    assert _numbers(cheap) == _numbers(full)


def test_statistics_suite_off_keeps_the_test_pass_and_nulls_the_suite(tiny_cfg, float64):
    """Reference: the full suite on the same BN model: with statistics_suite=false the test and training-set
    accuracies are the same numbers, the three statistics passes are null (not run: their clocks are absent)."""
    from normbench.train.evaluate import PassClock

    splits = data.load(tiny_cfg.data, torch.device("cpu"))
    torch.manual_seed(0)
    net = models.create(tiny_cfg.model, norms.factory("bn"), splits.shape, 10).eval()
    cfg = replace(tiny_cfg, batch_size=7)
    full = default.evaluations(net, splits, cfg)
    clock = PassClock()
    off = default.evaluations(net, splits, replace(cfg, statistics_suite=False), clock=clock)
    suite = default.STATISTICS
    assert all(full[k] is not None for k in suite) and all(off[k] is None for k in suite)
    assert {k: off[k] for k in ("test_acc", "test_loss", "train_acc")} == \
        {k: full[k] for k in ("test_acc", "test_loss", "train_acc")}
    assert not set(clock.seconds) & set(suite)


HEAVY, MIXED_TM, HEAVY_TM = "test_acc_heavy_pad", "test_acc_mixed_train_mode", "test_acc_heavy_pad_train_mode"


@pytest.mark.parametrize("model, norm, masked, placement, derived", [
    ("rnn", "ln", None, "output", {HEAVY, MIXED_TM, HEAVY_TM}),
    ("rnn", "rms", None, "output", {HEAVY, MIXED_TM, HEAVY_TM}),
    ("rnn", "ln", None, "recurrent", {HEAVY, MIXED_TM, HEAVY_TM}),
    ("rnn", "bn", True, "output", {HEAVY, HEAVY_TM}),
    ("rnn", "bn", True, "input", {HEAVY, HEAVY_TM}),
    ("rnn", "bn", False, "output", {HEAVY}),
    ("rnn", "pn", True, "output", {HEAVY, MIXED_TM, HEAVY_TM}),
    ("rnn", "none", None, "output", {HEAVY, MIXED_TM, HEAVY_TM}),
    ("rnn", "brn", True, "output", {HEAVY, HEAVY_TM}),
    ("rnn", "bn", True, "recurrent", {HEAVY}),  # per-step statistics: not counted, their pass runs
    ("transformer", "bn", True, "pre", {HEAVY, HEAVY_TM}),
    ("transformer", "bn", True, "post", {HEAVY, HEAVY_TM}),
    ("transformer", "bn", False, "pre", {HEAVY}),
    ("transformer", "pn", True, "pre", {HEAVY, MIXED_TM, HEAVY_TM}),
    ("transformer", "dyt", None, "pre", {HEAVY, MIXED_TM, HEAVY_TM}),
])
def test_variable_length_suite_unchanged(tiny_cfg, float64, monkeypatch, model, norm, masked, placement, derived):
    """Reference: the full variable-length suite in float64 on the same model: heavy padding's running-
    statistics accuracy equals the mixed test's (a causal RNN or a Transformer's masked attention and
    pooling, per-token norms in eval mode: BN too); a batch-free model's batch-statistics columns (PowerNorm's:
    its forward divides by running statistics) equal its eval-mode ones; masked BN's batch statistics at
    heavy padding equal them at the mixed test's (padding enters no statistics); naive BN runs both. Every
    number as the full suite's."""
    vl = VarLenConfig(enabled=True, min_len=6, max_len=10, test_lengths=[8, 10, 14], heavy_pad=2.5)
    cfg = replace(tiny_cfg, model=ModelConfig(name=model, hidden=12 if model == "rnn" else 16, placement=placement,
                                              depth=1 if model == "rnn" else 2),
                  norm=replace(tiny_cfg.norm, name=norm, masked=masked), varlen=vl, batch_size=8)
    splits = data.load(cfg.data, torch.device("cpu"))
    torch.manual_seed(0)
    net = models.create(cfg.model, norms.factory(norm, **({} if masked is None else {"masked": masked})),
                        splits.shape, 10).train()
    norms.set_total_steps(net, -(-len(splits.train_x) // 8))  # Batch Renorm's schedule: the epoch below
    for x, y, lengths in variable_length.train_batches(cfg)(splits.train_x, splits.train_y, 8, shuffle=True,
                                                            generator=torch.Generator().manual_seed(0)):
        net(x, lengths)  # running statistics for BN
    net.eval()
    cheap = variable_length.evaluations(net, splits, cfg)
    assert set(cheap["eval_derived"]) & {HEAVY, MIXED_TM, HEAVY_TM} == derived
    with monkeypatch.context() as m:
        _full_suite(m)
        full = variable_length.evaluations(net, splits, cfg)
    assert "eval_derived" not in full
    assert _numbers(cheap) == _numbers(full)
    # the control: with batch statistics, heavy padding moves a naive BN's answers, not the others'
    # (recurrent BN's masked per-step statistics neither, though the rule leaves it out)
    lengths = varlen.random_lengths(len(splits.test_x), vl.min_len, vl.max_len, torch.Generator().manual_seed(0))
    (x1, _, n), (x3, _, _) = (next(varlen.padded_batches(splits.test_x, splits.test_y, lengths, 8, pad))
                              for pad in (1.0, vl.heavy_pad))
    def answers(x):  # each pass from the same state, as evaluate's (Batch Renorm's step counts move in one)
        with torch.no_grad(), batch_statistics(net):
            return net(x, n)

    moved = (answers(x1) - answers(x3)).abs().max().item()
    assert moved > 1e-6 if masked is False else moved < 1e-9, moved


@pytest.mark.parametrize("samples", [50, 10_000])  # fewer training images than there are, and more (all)
@pytest.mark.parametrize("case", ["mlp", "mlp pack", "mlp pack past its limit", "rnn stretched"])
def test_joined_precise_bn_is_precise_bn_at_the_training_batch(tiny_cfg, float64, monkeypatch, samples, case):
    """Reference: PreciseBN at the training batch size, as its definition reads: batches of 7 drawn by the
    run's seed, the last partial one dropped, whole batches until `samples` were seen. The suite's pass
    joins them (groups of 7 normalized on their own in batches of 245, `default.recompute`): the same
    samples seen, and every buffer equal to 1e-12, for a plain model, a pack, a pack whose limit sends
    batches of 245 member by member (each member's statistics recomputed alone, then written back into the
    pack's), and recurrent BN's per-step statistics on images stretched to 14 rows."""
    import copy

    from normbench.data import varlen
    from normbench.pack.members import Solo
    from normbench.pack.model import PackedModel
    from normbench.regimes import precise_bn

    monkeypatch.setattr(default, "PRECISE_SAMPLES", samples)
    cfg, batch_fn, steps = replace(tiny_cfg, batch_size=7), data.batches, None
    if case == "rnn stretched":
        cfg = replace(cfg, model=ModelConfig(name="rnn", hidden=12, placement="recurrent"))
        batch_fn, steps = varlen.fixed_length(14), 14
    splits = data.load(cfg.data, torch.device("cpu"))
    torch.manual_seed(0)
    nets = [models.create(cfg.model, norms.factory("bn"), splits.shape, 10) for _ in range(2)]
    limits = {"mlp pack": lambda b: True, "mlp pack past its limit": lambda b: b < 100}
    model = PackedModel(nets, seeds=[0, 1], packs=limits[case]) if case in limits else Solo(nets[0], cfg.seed)
    joined, by_hand = copy.deepcopy(model), copy.deepcopy(model)
    done = default.recompute(joined, splits, cfg, batch_fn, steps=steps)
    ref = precise_bn.recompute_statistics(by_hand, default.precise_batches(by_hand, splits, cfg, batch_fn),
                                          samples, steps=steps, batch_dim=by_hand.batch_dim)
    assert done.samples == ref.samples == min(-(-samples // 7), len(splits.train_x) // 7) * 7
    assert default._large(cfg) == 245 and done.layers == ref.layers > 0
    for (name, a), (_, b) in zip(joined.named_buffers(), by_hand.named_buffers(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)
