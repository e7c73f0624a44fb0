"""The variable-length regime's two designs (configs/varlen_design/): bucketed batching and the per-step
sample counts, the PreciseBN control, background rows, varying padding, BN on W_x x_t and the padding shift;
each against a hand computation or torch's own layers."""

import copy
import statistics
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from normbench import data, models, norms
from normbench.config import ModelConfig, VarLenConfig
from normbench.data import varlen
from normbench.models import cells
from normbench.regimes import precise_bn, variable_length
from normbench.train.evaluate import evaluate


def test_bucket_lengths_give_equal_shares():
    """Reference: the rule by hand: at batch 64 and min_step_samples 32 a bucket spans 2 lengths, 32
    samples each; at batch 60 and 16, 3 lengths of 20; the bucket lies inside [min_len, max_len]."""
    cfg = VarLenConfig(enabled=True, batching="bucketed", min_step_samples=32)
    assert varlen.bucket_width(cfg, 64) == 2 and varlen.bucket_width(replace(cfg, min_step_samples=16), 60) == 3
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        lengths = varlen.bucket_lengths(60, 10, 28, 3, gen)
        first = int(lengths.min())
        assert 10 <= first and first + 2 <= 28
        assert sorted(torch.bincount(lengths - first).tolist()) == [20, 20, 20]


def test_bucketed_training_gives_every_step_32_samples():
    """Reference: the design's promise, counted by the per-step norms themselves: recurrent BN trained on
    bucketed batches of 64 records at least 32 real samples per batch at every trained step, where mixed
    batching leaves the last step a few (the statistics the review found worst estimated)."""
    x = torch.randn(640, 1, 28, 28)
    y = torch.randint(0, 10, (640,))
    counts = {}
    for batching in ("bucketed", "mixed"):
        torch.manual_seed(0)
        net = models.create(ModelConfig(name="rnn", hidden=8, placement="recurrent"), norms.factory("bn"),
                            (1, 28, 28), 10).train()
        batch_fn = varlen.train_batches(VarLenConfig(enabled=True, batching=batching))
        for xb, _, lengths in batch_fn(x, y, 64, shuffle=True, generator=torch.Generator().manual_seed(1)):
            net(xb, lengths)
        counts[batching] = cells.step_samples(net)
    bucketed, mixed = counts["bucketed"], counts["mixed"]
    assert bucketed["summary"]["min"] >= 32 and min(bucketed["min"]) >= 32
    assert mixed["summary"]["last_min"] < 32
    assert bucketed["summary"]["median"] == pytest.approx(statistics.median(bucketed["mean"]))


def test_step_counts_by_hand():
    """Reference: counted by hand for three batches of 4 with lengths (3, 2, 2, 1), (3, 3, 3, 3), (1, 1, 1, 1):
    step 0 sees 4 samples in each, step 1 3 and 4 (the third batch does not reach it), step 2 1 and 4."""
    net = models.create(ModelConfig(name="rnn", hidden=4, placement="recurrent"), norms.factory("bn"),
                        (1, 3, 5), 10).train()
    for lengths in ([3, 2, 2, 1], [3, 3, 3, 3], [1, 1, 1, 1]):
        net(torch.randn(4, 1, 3, 5), torch.tensor(lengths))
    got = cells.step_samples(net)
    assert got["min"] == [4, 3, 1] and got["mean"] == [4.0, 3.5, 2.5]
    assert got["summary"] == {"min": 1, "median": 3.5, "last": 2.5, "last_min": 1}


def test_background_rows_keep_the_image():
    """Reference: the manipulation's definition: past the image's 28 rows the rows are the background
    value; the first 28 are the image itself; shorter lengths are the stretched (squeezed) image."""
    x = torch.randn(3, 1, 28, 28)
    (long, _, lengths), = varlen.background_rows(36, -0.8)(x, torch.zeros(3), 3)
    assert long.shape == (3, 1, 36, 28) and torch.equal(long[:, :, :28], x) and (long[:, :, 28:] == -0.8).all()
    assert lengths.tolist() == [36, 36, 36]
    (short, _, _), = varlen.background_rows(20, -0.8)(x, torch.zeros(3), 3)
    torch.testing.assert_close(short, varlen.resize_rows(x, 20))


def test_training_padding_varies_and_holds_the_background():
    """Reference: the batches themselves: with train_pad_max each batch's total length is its longest
    times a factor in [train_pad, train_pad_max] (several distinct factors over an epoch), and padded rows
    hold the normalized background (the data's minimum) with pad_value=background."""
    x = torch.rand(256, 1, 28, 28) - 0.3
    cfg = VarLenConfig(enabled=True, train_pad=1.0, train_pad_max=2.0, pad_value="background")
    factors = []
    for xb, _, lengths in varlen.train_batches(cfg)(x, torch.zeros(256), 32, shuffle=True,
                                                      generator=torch.Generator().manual_seed(0)):
        longest = int(lengths.max())
        assert longest <= xb.shape[2] <= 2 * longest + 1
        factors.append(xb.shape[2] / longest)
        padded = torch.arange(xb.shape[2])[None, :] >= lengths[:, None]
        assert (xb[:, 0][padded] == float(x.amin())).all()
    assert len(set(factors)) > 3


def test_bn_on_wx_sees_padding_undiluted():
    """Reference: torch's BatchNorm1d on W_x x_t flattened over (N, T), padding included (naive), against
    model.placement=input's norm in the layer; masked BN's statistics over the real rows only."""
    torch.manual_seed(0)
    for masked in (False, True):
        make = norms.factory("bn", masked=masked)
        layer = cells.recurrent_layer("rnn", 5, 6, make, placement="input").train()
        seq = torch.randn(4, 7, 5)
        mask = torch.arange(7) < torch.tensor([7, 3, 5, 2])[:, None]
        seen = []
        layer.norm_in.register_forward_hook(lambda m, args, out: seen.append(out))
        layer(seq, mask)
        wx = layer.ih(seq)  # (N, T, 6), no bias: BN's shift replaces it
        rows = wx[mask] if masked else wx.flatten(0, 1)
        mean, var = rows.mean(0), rows.var(0, unbiased=False)
        want = (wx - mean) / torch.sqrt(var + 1e-5) * layer.norm_in.weight + layer.norm_in.bias
        got = seen[0]
        torch.testing.assert_close(got[mask] if masked else got, want[mask] if masked else want, rtol=1e-5, atol=1e-5)


def test_padding_shift_by_hand():
    """Reference: numpy-free arithmetic in float64: one channel whose real values are 1, 2, 3 (mean 2, SD
    sqrt(2/3)) and three padded zeros: the mean over all six is 1, a shift of 1 / sqrt(2/3) = 1.2247 SD;
    the SD over all six is sqrt(14/6 - 1) = 1.1547, a ratio of 1.4142; half the positions are padding."""
    x = torch.tensor([[1.0, 2.0, 3.0, 0.0, 0.0, 0.0]]).unsqueeze(-1)
    mask = torch.tensor([[True, True, True, False, False, False]])
    got = variable_length.shift_of(x, mask)
    assert got["mean_shift_sd"] == pytest.approx(1 / (2 / 3) ** 0.5)
    assert got["sd_ratio"] == pytest.approx((14 / 6 - 1) ** 0.5 / (2 / 3) ** 0.5)
    assert got["padding_share"] == pytest.approx(0.5)


def _bn_rnn_after_one_epoch(tiny_cfg, vl: VarLenConfig):
    """A recurrent-BN RNN (seed 0) whose running statistics saw one epoch of the tiny data's batches of
    10 at `vl`'s lengths (training mode forward passes only): its config, splits and the model."""
    cfg = replace(tiny_cfg, model=ModelConfig(name="rnn", hidden=16, placement="recurrent"), varlen=vl,
                  batch_size=10)
    splits = data.load(cfg.data, torch.device("cpu"))
    torch.manual_seed(0)
    net = models.create(cfg.model, norms.factory("bn"), splits.shape, 10).train()
    for x, y, lengths in variable_length.train_batches(cfg)(splits.train_x, splits.train_y, 10, shuffle=True,
                                                            generator=torch.Generator().manual_seed(0)):
        net(x, lengths)
    return cfg, splits, net


def test_precise_bn_control_keeps_the_trained_steps(tiny_cfg):
    """Reference: the control's definition: after re-estimating on images stretched to L, the steps before
    max_len hold exactly the trained statistics (the model before PreciseBN) and the steps past it the
    re-estimated ones (the full PreciseBN's); at L = max_len nothing is re-estimated, so the accuracy is the
    plain test at that length."""
    vl = VarLenConfig(enabled=True, min_len=6, max_len=10, test_lengths=[10, 14], batching="bucketed",
                      min_step_samples=5)
    cfg, splits, net = _bn_rnn_after_one_epoch(tiny_cfg, vl)
    net.eval()
    from normbench.pack.members import Solo
    from normbench.regimes import default

    full = Solo(copy.deepcopy(net), cfg.seed)  # PreciseBN's batches drawn by the run's seed, as a run's
    batches = default.precise_batches(full, splits, cfg, varlen.fixed_length(14))
    precise_bn.recompute_statistics(full, batches, default.PRECISE_SAMPLES, steps=14, batch_dim=full.batch_dim)
    control = copy.deepcopy(full)
    cells.restore_steps(control, net, 10)
    for c, f, trained in zip(*[[m for m in model.modules() if isinstance(m, cells.StepNorm) and m.per_step]
                               for model in (control, full, net)]):
        steps_c, steps_f, steps_t = [c.norm, *c.steps], [f.norm, *f.steps], [trained.norm, *trained.steps]
        for t in range(14):
            want = steps_t[t] if t < 10 else steps_f[t]
            assert torch.equal(steps_c[t].running_mean, want.running_mean), t
    at_max_model = variable_length.stretched_precise_bn(Solo(net, cfg.seed), splits, cfg, 10)
    cells.restore_steps(at_max_model, net, 10)
    at_max = evaluate(at_max_model, varlen.length_batches(splits.test_x, splits.test_y, 10, cfg.eval_batch_size)).acc
    plain = evaluate(net, varlen.length_batches(splits.test_x, splits.test_y, 10, cfg.eval_batch_size)).acc
    assert at_max == plain


def test_first_layer_grad_ratio_by_hand(tiny_cfg, tmp_path):
    """Reference: the ratio computed by hand for the run's first step: the same model (seed 0), the first
    training batch (the run's shuffle generator), cross-entropy, ||dL/dW|| / ||W|| of the first linear
    layer; results.json's first_layer_grad_ratio, train_s and eval_s (the sum of eval_passes)."""
    import json

    from normbench.runner import run

    run(replace(tiny_cfg, max_steps=2), tmp_path)
    res = json.loads((tmp_path / "results.json").read_text())
    splits = data.load(tiny_cfg.data, torch.device("cpu"))
    torch.manual_seed(tiny_cfg.seed)
    net = models.create(tiny_cfg.model, norms.factory("bn"), splits.shape, 10).train()
    x, y, _ = next(iter(data.batches(splits.train_x, splits.train_y, tiny_cfg.batch_size, shuffle=True,
                                     generator=torch.Generator().manual_seed(tiny_cfg.seed), drop_last=True)))
    F.cross_entropy(net(x), y).backward()
    w = net.net[1].weight
    assert res["first_layer_grad_ratio"] == pytest.approx(float(w.grad.norm() / w.detach().norm()), rel=1e-5)
    assert res["train_s"] > 0 and res["eval_s"] == pytest.approx(sum(res["eval_passes"].values()))
    assert {"validation", "test", "test_acc_train_mode", "test_acc_precise_bn"} <= set(res["eval_passes"])


@pytest.mark.parametrize("study", ["variable_length", "variable_length_transformer"])
def test_shipped_claims_read_tested_lengths(study):
    """Reference: each shipped experiment's declared claims (its yaml) against the lengths its designs test,
    as Hydra composes them: every term `test_acc_by_length*.N` of a claim's metric (its own or a side's)
    needs N among the lengths that pass computes (varlen.precise_bn_lengths for the PreciseBN variants,
    varlen.test_lengths otherwise) in the design the side selects (bucketed: length, mixed: padding), or the
    claim could never be tested. The Transformer's designs test 6 lengths (what keeps its evaluation at a
    fifth of a run, docs/performance.md); the RNN's length design every second one."""
    from normbench.bench.eval_share import compose

    composed = {design: compose(study, [f"varlen_design={design}"], "/nowhere").varlen
                for design in ("length", "padding")}
    if study == "variable_length_transformer":
        assert composed["length"].test_lengths == composed["padding"].test_lengths == [10, 14, 20, 28, 36, 42]
    else:
        assert composed["length"].test_lengths == list(range(10, 43, 2))
    by_batching = {getattr(v.batching, "value", v.batching): v for v in composed.values()}
    read = 0
    for name, batching, key, length in _lengths_read(compose(study, [], "/nowhere").claims, study):
        v = by_batching[batching]
        assert length in (v.precise_bn_lengths if "precise_bn" in key else v.test_lengths), (name, key, length)
        read += 1
    assert read >= 2  # the length claims exist: this test checks something


def _lengths_read(declared: list[dict], study: str):
    """(claim, varlen.batching, key, N) for each `key.N` term (key test_acc_by_length*) a declared claim
    reads in a cell (Claim.readings: each side's own metric or the claim's)."""
    from normbench.summary import claims, metrics

    for c in claims.parse(declared, study, study):
        for sel in c.readings():
            for term in metrics.terms(sel["metric"]):
                if term.startswith("test_acc_by_length"):
                    key, length = term.rsplit(".", 1)
                    yield c.name, sel["varlen.batching"], key, int(length)


@pytest.mark.parametrize("study", ["variable_length", "variable_length_transformer"])
@pytest.mark.parametrize("scale", ["laptop", "full"])
def test_every_study_scale_tests_the_lengths_its_claims_read(study, scale):
    """Reference: the declared claims (the experiment's yaml) against each study job as `normbench study`
    composes it at that scale (its sweep's overrides and the scale's, Hydra's composition): where a scale
    tests fewer lengths (laptop: the ones the claims read), every `test_acc_by_length*.N` a claim reads in
    that job's design is still tested."""
    from normbench.study import jobs as joblist
    from normbench.study import spec
    from normbench.study.estimate import compose

    plan = spec.load(study)
    composed = [compose(list(j.overrides)) for j in joblist.study_jobs(plan, scale)]
    read = 0
    for name, batching, key, length in _lengths_read(composed[0].claims, study):
        for v in (cfg.varlen for cfg in composed):
            if getattr(v.batching, "value", v.batching) == batching and v.design == "length":
                assert length in (v.precise_bn_lengths if "precise_bn" in key else v.test_lengths), \
                    (name, key, length, scale)
                read += 1
    assert read >= 2


@pytest.mark.parametrize("design", ["length", "padding", pytest.param(None, marks=pytest.mark.slow)])
def test_a_design_runs_its_own_questions_passes(tiny_cfg, design):
    """Reference: each question's results (the length design's accuracies by length, the padding design's
    mixed-length and padding ones) against the design that asks it; without a design, both and the
    statistics suite. The accuracy at the images' own 28 rows is taken from the test pass: checked against
    a pass at that length (resizing to 28 rows is the identity)."""
    vl = VarLenConfig(enabled=True, design=design, min_len=10, max_len=28, test_lengths=[20, 28, 36],
                      precise_bn_lengths=[28], batching="bucketed" if design == "length" else "mixed",
                      min_step_samples=5)
    cfg, splits, net = _bn_rnn_after_one_epoch(tiny_cfg, vl)
    out = variable_length.evaluations(net.eval(), splits, cfg)
    length_keys = {"test_acc_by_length", "test_acc_by_length_background", "test_acc_by_length_precise_bn",
                   "test_acc_by_length_precise_bn_past"}
    padding_keys = {"test_acc_mixed", "test_acc_heavy_pad", "test_acc_mixed_train_mode",
                    "test_acc_heavy_pad_train_mode", "padding_shift"}
    assert (length_keys <= set(out)) == (design in ("length", None))
    assert not (length_keys & set(out)) or design in ("length", None)
    assert (padding_keys <= set(out)) == (design in ("padding", None))
    assert not (padding_keys & set(out)) or design in ("padding", None)
    assert (out["test_acc_train_mode"] is None) == (design is not None)
    assert (out["test_acc_precise_bn"] is None) == (design is not None)
    if design != "padding":
        at_28 = evaluate(net, varlen.length_batches(splits.test_x, splits.test_y, 28, cfg.eval_batch_size)).acc
        assert out["test_acc_by_length"]["28"] == at_28 == out["test_acc"]
        assert "test_acc_by_length.28" in out["eval_derived"]
        assert set(out["test_acc_by_length"]) == {"20", "28", "36"}
