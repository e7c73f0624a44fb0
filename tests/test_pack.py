"""Packed training against its reference, separate runs: in float64 on the CPU, member k of a pack with
seed s trains exactly as the run seed=s (every step's loss, every parameter and running statistic after 50
steps, to 1e-8), for every norm of the catalog in every model it supports, both RNN placements and the
variable-length batches with masks; members' own learning rates (SGD with momentum, AdamW) against runs
with torch's fused optimizers; a diverging member leaves the others as they would be alone."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from conftest import normbench_cli

from normbench import data, norms, regimes
from normbench.config import Config, DataConfig, ModelConfig, NormConfig, PackConfig, VarLenConfig
from normbench.errors import UserError
from normbench.pack.layers import PerMember
from normbench.pack.model import PackedModel
from normbench.pack.plan import members as pack_members
from normbench import runner
from normbench.train.loop import fit, train
from normbench.train.tracking import NullTracker

STEPS, TOL = 50, 1e-8
SMALL = {"mlp": {"hidden": 24}, "cnn": {"channels": [8, 8], "hidden": 16}, "rnn": {"hidden": 16},
         "transformer": {"hidden": 16, "depth": 2, "heads": 2}}


class Losses(NullTracker):
    def __init__(self):
        self.losses: list[float] = []

    def step(self, step, metrics):
        self.losses.append(metrics["loss/train"])


def config(tiny_root, model: str, norm: str, model_opts: dict | None = None, norm_opts: dict | None = None,
           **kw) -> Config:
    model_kw = {**SMALL[model], "dropout": 0.0, **(model_opts or {})}
    kw = {"batch_size": 4, **kw}
    return Config(model=ModelConfig(name=model, **model_kw), norm=NormConfig(name=norm, **(norm_opts or {})),
                  data=DataConfig(root=str(tiny_root), val_size=100, download=False),
                  max_steps=STEPS, log_every=1, progress=False, tensorboard=False, device="cpu", **kw)


def separate(cfg: Config, splits):
    """The reference: the run `cfg` alone, as runner.run trains it."""
    device, make = runner.setup(cfg)
    results: dict = {}
    model = runner.build_model(cfg, make, splits, device, results)
    tracker = Losses()
    fitted = fit(model, splits, replace(cfg, lr=results["lr_effective"]), tracker, device,
                 batch_fn=regimes.for_config(cfg).train_batches(cfg))
    return tracker.losses, model, fitted


def packed(cfg: Config, splits: data.MemberSplits):
    """The same members as one pack, as runner.run trains them (loop.train over a PackedModel), each on
    its own splits."""
    pack = pack_members(cfg)
    device, make = runner.setup(pack[0][1])
    results = [{} for _ in pack]
    models = [runner.build_model(m, make, s, device, r) for (_, m), s, r in zip(pack, splits.each, results)]
    trackers = [Losses() for _ in pack]
    packed_model = PackedModel(models)
    fitted = train(packed_model, splits, [replace(m, lr=r["lr_effective"]) for (_, m), r in zip(pack, results)],
                   trackers, device, batch_fn=regimes.for_config(cfg).train_batches(cfg))
    # The last training batch's padded lengths must not outlive it (validation would run with them)
    assert all(m.steps is None for m in packed_model.net.modules() if isinstance(m, PerMember))
    return [(t.losses, m, f) for t, m, f in zip(trackers, models, fitted)], [m for _, m in pack]


def assert_members_equal_separate_runs(cfg: Config):
    """Each member's losses, validation and final state against its run alone, each on its own split
    (data.split=per_seed: its seed's; fixed: one for all)."""
    with torch_dtype(torch.float64):
        splits = data.MemberSplits.of([data.load(m.data, torch.device("cpu"), seed=m.seed)
                                       for _, m in pack_members(cfg)])
        got, member_cfgs = packed(cfg, splits)
        for (losses, model, fitted), member, own in zip(got, member_cfgs, splits.each):
            want_losses, want_model, want_fit = separate(member, own)
            assert fitted.status == want_fit.status and fitted.diverged_step == want_fit.diverged_step
            assert len(losses) == len(want_losses) > 0
            # (relative too: a diverging member's last losses are astronomically large)
            torch.testing.assert_close(torch.tensor(losses), torch.tensor(want_losses), rtol=TOL, atol=TOL)
            # every epoch's validation too (the run stops mid-epoch at max_steps, then validates)
            assert len(fitted.history) == len(want_fit.history)
            for have_epoch, want_epoch in zip(fitted.history, want_fit.history):
                for key in ("step", "loss/val", "acc/val"):
                    assert have_epoch[key] == pytest.approx(want_epoch[key], rel=TOL, abs=TOL, nan_ok=True), key
            if want_fit.status == "diverged":  # the run stopped there; the member's slices go on as NaN
                continue
            want = want_model.state_dict()
            have = model.state_dict()
            assert have.keys() == want.keys()
            for key in want:
                if want[key].is_floating_point():
                    torch.testing.assert_close(have[key], want[key], rtol=0, atol=TOL, msg=key)
                else:
                    assert torch.equal(have[key], want[key]), key
        return got


class torch_dtype:
    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.old = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.old)


LAYOUT = {"mlp": "flat", "cnn": "image", "rnn": "seq"}


def _defined(model: str, norm: str, placement: str = "output") -> bool:
    spec = norms.get(norm)
    if LAYOUT[model] in spec.unsupported:
        return False
    if placement == "recurrent":
        return norm == "none" or spec.reparameterizes or ("flat" not in spec.unsupported and not spec.own_activation)
    return True


CATALOG = [(m, n, "output") for m in ("mlp", "cnn", "rnn") for n in norms.names() if _defined(m, n)] + \
          [("rnn", n, "recurrent") for n in norms.names() if _defined("rnn", n, "recurrent")]


@pytest.mark.parametrize("model,norm,placement", CATALOG, ids=["-".join(c) for c in CATALOG])
def test_every_norm_in_every_model_trains_packed_as_separate_runs(model, norm, placement, tiny_root):
    kw = {"model_opts": {"placement": placement}} if model == "rnn" else {}
    assert_members_equal_separate_runs(config(tiny_root, model, norm, pack=PackConfig(seeds=[0, 1]), **kw))


VARIANTS = {
    "lstm-ln": ("rnn", "ln", {"model_opts": {"cell": "lstm"}}),
    "gru-bn": ("rnn", "bn", {"model_opts": {"cell": "gru"}}),
    "lstm-recurrent-bn": ("rnn", "bn", {"model_opts": {"cell": "lstm", "placement": "recurrent"}}),
    # SGD: the bias of the layer before a ghost BN has a gradient that is zero in exact arithmetic (the
    # mean subtraction cancels it), and AdamW would turn its rounding noise, which any other order of
    # the same sums changes, into lr-sized steps. Ghost batches of 4: BN over 2 values is +-1, a step
    # function of its inputs, where rounding alone can flip a sign.
    "bn-ghost": ("mlp", "bn", {"norm_opts": {"ghost_batch": 4}, "optimizer": "sgd", "lr": 0.05, "batch_size": 8}),
    "cnn-bn-ghost": ("cnn", "bn", {"norm_opts": {"ghost_batch": 2}, "optimizer": "sgd", "lr": 0.05}),
    "cnn-bn-positions": ("cnn", "bn", {"norm_opts": {"positions": 3}, "optimizer": "sgd", "lr": 0.05}),
    "bn-scratch": ("cnn", "bn", {"norm_opts": {"impl": "scratch"}}),
    # eps 0.1's output with eps 1e-5's gradient (issue 42): PackedBatchNorm splits as each member's BN does
    "bn-eps-grad": ("mlp", "bn", {"norm_opts": {"eps": 0.1, "eps_grad": 1e-5}}),
    "augmented": ("cnn", "gn", {"data": None}),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_cells_ghost_batches_scratch_and_augmentation_pack_as_separate_runs(name, tiny_root):
    model, norm, kw = VARIANTS[name]
    augment = kw.pop("data", "no") is None
    cfg = config(tiny_root, model, norm, pack=PackConfig(seeds=[0, 1]), **kw)
    if augment:
        cfg.data.augment = True
    assert_members_equal_separate_runs(cfg)


VARLEN = [("bn", {"masked": True}, "output"), ("bn", {"masked": False}, "output"), ("bn", {}, "recurrent"),
          ("ln", {}, "output"), ("ln", {}, "recurrent"), ("rms", {}, "output"), ("brn", {"masked": False}, "output")]


@pytest.mark.parametrize("norm,opts,placement", VARLEN, ids=[f"{n}-{p}-{o}" for n, o, p in VARLEN])
def test_variable_length_batches_with_masks_pack_as_separate_runs(norm, opts, placement, tiny_root):
    """Members draw their own lengths, so their batches differ in padded length: naive BN must count
    only its own member's padding."""
    cfg = config(tiny_root, "rnn", norm, norm_opts=opts, model_opts={"placement": placement},
                 varlen=VarLenConfig(enabled=True, min_len=6, max_len=28), pack=PackConfig(seeds=[0, 1, 2]),
                 batch_size=16)  # at 8, a late step's statistics may see one sample (variance 0): rounding
    # differences of 4e-16 grew to 1e-7 in 50 steps, where at 16 they stay below 1e-13
    assert_members_equal_separate_runs(cfg)


TRANSFORMER = [("ln", {"placement": "pre"}), ("rms", {"placement": "post"}), ("bn", {"placement": "pre"}),
               ("pn", {"placement": "post"}), ("dyt", {"qk_norm": "ln"}), ("none", {"qk_norm": "rms"}),
               ("ln", {"placement": "peri"}), ("derf", {"placement": "peri"})]


@pytest.mark.parametrize("norm,opts", TRANSFORMER, ids=[f"{n}-{'-'.join(o.values())}" for n, o in TRANSFORMER])
def test_transformer_packs_as_separate_runs(norm, opts, tiny_root):
    """Reference: each member trained alone (runner's own path), float64: one batched matmul per linear,
    one attention call over S x N sequences, LN and RMS packed (QK-norm's RMS too), BN on tokens as one
    kernel over S x C channels (TokenBatchNorm), every other norm per member; peri's output norms packed as
    its input norms are (LN) or per member (Derf)."""
    assert_members_equal_separate_runs(config(tiny_root, "transformer", norm, model_opts=opts,
                                              pack=PackConfig(seeds=[0, 1])))


TRANSFORMER_VARLEN = [("bn", {"masked": False}), ("pn", {}), ("ln", {})]


@pytest.mark.parametrize("norm,opts", TRANSFORMER_VARLEN, ids=[f"{n}-{o}" for n, o in TRANSFORMER_VARLEN])
def test_transformer_packs_variable_lengths_as_separate_runs(norm, opts, tiny_root):
    """Members' batches differ in padded length: masked attention and pooling per member, and naive BN
    counting only its own member's padding (PerMember trims to it)."""
    cfg = config(tiny_root, "transformer", norm, norm_opts=opts, varlen=VarLenConfig(enabled=True, min_len=6, max_len=28),
                 pack=PackConfig(seeds=[0, 1, 2]), batch_size=16)
    assert_members_equal_separate_runs(cfg)


PER_SEED = {  # each member on its own seed's split: one computation (pack.plan.decide), not one per seed
    "mlp-bn": ("mlp", "bn", {}),
    "cnn-gn": ("cnn", "gn", {}),
    "cnn-bn-augmented": ("cnn", "bn", {"data": None}),
    "rnn-ln-lrs": ("rnn", "ln", {"pack": PackConfig(seeds=[0, 1], lrs=[1e-3, 3e-3])}),
    "transformer-ln": ("transformer", "ln", {"model_opts": {"placement": "pre"}}),
    "rnn-varlen-naive-bn": ("rnn", "bn", {"norm_opts": {"masked": False}, "batch_size": 16,
                                          "varlen": VarLenConfig(enabled=True, min_len=6)}),
    # the shipped designs (configs/varlen_design): bucketed lengths; padding to a drawn factor, background
    "rnn-varlen-length-recurrent-bn": ("rnn", "bn", {"model_opts": {"placement": "recurrent"}, "batch_size": 16,
                                                     "varlen": VarLenConfig(enabled=True, min_len=6, design="length",
                                                                            batching="bucketed", min_step_samples=4)}),
    "transformer-varlen-padding-bn": ("transformer", "bn", {"norm_opts": {"masked": False}, "batch_size": 16,
                                                           "varlen": VarLenConfig(enabled=True, min_len=6,
                                                                                  design="padding", train_pad_max=2.0,
                                                                                  pad_value="background")}),
}


def per_seed(cfg: Config) -> Config:
    cfg.data.subset, cfg.data.split = 300, "per_seed"
    return cfg


@pytest.mark.parametrize("name", list(PER_SEED))
def test_members_on_their_own_splits_train_as_one_computation_as_separate_runs(name, tiny_root, tmp_path):
    """Reference: each member alone on its own seed's split (data.split=per_seed: its own validation split,
    subset and normalization). The pack trains them all as one computation (one group), each member drawing
    its batches from its own split."""
    from normbench.pack.plan import decide

    model, norm, kw = PER_SEED[name]
    augment = kw.get("data", "no") is None
    kw = {"pack": PackConfig(seeds=[0, 1]), **{k: v for k, v in kw.items() if k != "data"}}
    cfg = per_seed(config(tiny_root, model, norm, **kw))
    cfg.data.augment = augment
    assert len(decide(replace(cfg, pack=replace(cfg.pack, mode="packed")), tmp_path, "cpu").groups) == 1
    assert_members_equal_separate_runs(cfg)


@pytest.mark.parametrize("optimizer,lrs,extra", [("sgd", [0.01, 0.05], {"weight_decay": 1e-3}),
                                                 ("adam", [1e-3, 3e-3], {"weight_decay": 1e-2}),
                                                 ("adam", [1e-3, 3e-3], {"lr_scaling": "linear"})])
def test_members_own_learning_rates_match_runs_with_torch_optimizers(optimizer, lrs, extra, tiny_root):
    cfg = config(tiny_root, "cnn", "bn", optimizer=optimizer, pack=PackConfig(seeds=[0, 1], lrs=lrs),
                 warmup_steps=5, **extra)
    got = assert_members_equal_separate_runs(cfg)
    assert len(got) == 4


def test_a_diverging_member_is_recorded_at_its_step_and_the_others_train_on(tiny_root):
    """Reference: the members' separate runs, one of which diverges (SGD at lr 1e300: inf weights, NaN loss)."""
    cfg = config(tiny_root, "mlp", "none", optimizer="sgd", momentum=0.0, pack=PackConfig(seeds=[0], lrs=[0.01, 1e300]))
    got = assert_members_equal_separate_runs(cfg)
    (_, _, ok), (_, _, bad) = got
    assert ok.status == "completed" and ok.steps == STEPS
    assert bad.status == "diverged" and bad.diverged_step < STEPS


def test_packed_run_writes_each_member_as_a_run(tiny_root, tmp_path):
    """Reference: the single-run contract (what summarize reads), one results.json per member."""
    cfg = config(tiny_root, "mlp", "bn", pack=PackConfig(seeds=[3, 4], lrs=[1e-3, 2e-3]))
    cfg.log_every, cfg.tensorboard = 10, True
    summary = runner.run(cfg, tmp_path)
    assert summary["status"] == "completed" and len(summary["members"]) == 4
    for lr in (1e-3, 2e-3):
        for seed in (3, 4):
            d = tmp_path / f"lr={lr:g},seed={seed}"
            res = json.loads((d / "results.json").read_text())
            assert res["config"]["seed"] == seed and res["config"]["lr"] == lr
            assert res["config"]["pack"]["seeds"] is None and res["packed"]["members"] == 4
            assert res["status"] == "completed" and 0 <= res["test_acc"] <= 1 and res["test_acc_precise_bn"] is not None
            assert list(d.glob("events.out.tfevents.*"))
    accs = {json.loads(p.read_text())["test_acc"] for p in tmp_path.glob("*/results.json")}
    assert len(accs) > 1  # four different runs, not one copied
    from normbench.summary.discover import find_runs

    (tmp_path / ".hydra").mkdir()  # as Hydra leaves the pack's directory: its command line
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- experiment=small_batch\n")
    runs = find_runs(tmp_path)  # the members, as separate runs; not the pack's own directory
    assert sorted(r.path.name for r in runs) == sorted(d.name for d in tmp_path.glob("lr=*"))
    assert {r.status for r in runs} == {"completed"}
    assert {r.study for r in runs} == {"small_batch"}  # each member is of the study its pack was launched as
    (tmp_path / "pack.json").unlink()  # a pack kept without its pack.json (runs kept before keep_runs copied it)
    assert [(r.path, r.status, r.study) for r in find_runs(tmp_path)] == [(r.path, r.status, r.study) for r in runs]


@pytest.mark.parametrize("pack,why", [
    ({"seeds": []}, "pack.seeds is empty"),
    ({"seeds": [1, 1]}, "pack.seeds lists 1 more than once"),
    ({"lrs": [0.1, -1.0]}, "pack.lrs must be > 0"),
])
def test_bad_packs_are_refused_with_one_line(pack, why, tiny_cfg, tmp_path):
    with pytest.raises(UserError, match=why):
        runner.run(replace(tiny_cfg, pack=PackConfig(**pack)), tmp_path)


def test_seed_and_pack_seeds_together_is_one_line_and_exit_2(tiny_root, tmp_path):
    r = normbench_cli("train", f"data.root={tiny_root}", "data.download=false", "data.val_size=100", "seed=3",
                      "pack.seeds=[0,1]", "max_steps=2", "progress=false", f"hydra.run.dir={tmp_path}/r", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "seed=3 and pack.seeds both choose the seed" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_pack_lrs_null_lets_an_experiment_with_an_lr_grid_run_one_lr(tiny_root, tmp_path):
    """Reference: the shipped studies set pack.lrs; `pack.lrs=null lr=0.1` is the documented way back to
    one learning rate, a plain run (no pack.json, lr as given)."""
    r = normbench_cli("train", f"data.root={tiny_root}", "data.download=false", "data.val_size=100", "pack.lrs=null",
                      "lr=0.1", "max_steps=2", "progress=false", f"hydra.run.dir={tmp_path}/r", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "r" / "results.json").read_text())
    assert res["config"]["lr"] == 0.1 and res["config"]["pack"]["lrs"] is None and res.get("packed") is None


def _numbers(res: dict, prefix: str = "") -> dict[str, float]:
    """Every number a run's results hold about its model (not timings), by dotted key."""
    skip = {"wall_s", "train_s", "eval_s", "eval_passes", "train_samples_per_s", "throughput", "lr_effective",
            "torch_threads"}
    out = {}
    for k, v in res.items():
        if k in skip or k in ("config", "versions", "packed", "history"):
            continue
        if isinstance(v, dict):
            out.update(_numbers(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix + k] = v
    for e in res.get("history", []):
        out.update({f"history.{e['epoch']}.{k}": v for k, v in e.items() if k != "train_samples_per_s"})
    return out


EVALUATED = {
    "mlp-bn": ("mlp", "bn", {}),
    "cnn-brn-ghost": ("cnn", "brn", {"norm_opts": {"ghost_batch": 2}, "optimizer": "sgd", "lr": 0.05}),
    "rnn-varlen-naive-bn": ("rnn", "bn", {"norm_opts": {"masked": False}, "batch_size": 16,
                                          "varlen": VarLenConfig(enabled=True, min_len=6, test_lengths=[6, 28, 36])}),
    "rnn-varlen-recurrent-bn": ("rnn", "bn", {"model_opts": {"placement": "recurrent"}, "batch_size": 16,
                                              "varlen": VarLenConfig(enabled=True, min_len=6, test_lengths=[6, 36])}),
    # data.split=per_seed: every pass on each member's own split (its normalization, its background value)
    "per-seed-cnn-bn": ("cnn", "bn", {"split": "per_seed"}),
    "per-seed-varlen-length": ("rnn", "bn", {"model_opts": {"placement": "recurrent"}, "batch_size": 16,
                                             "split": "per_seed",
                                             "varlen": VarLenConfig(enabled=True, min_len=6, test_lengths=[6, 36],
                                                                    design="length", batching="bucketed",
                                                                    min_step_samples=4)}),
    "per-seed-varlen-padding": ("rnn", "bn", {"norm_opts": {"masked": False}, "batch_size": 16, "split": "per_seed",
                                              "varlen": VarLenConfig(enabled=True, min_len=6, test_lengths=[6, 36],
                                                                     design="padding", train_pad_max=2.0,
                                                                     heavy_pad=3.0, pad_value="background")}),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "per-seed-varlen-length" else n
                                  for n in EVALUATED])  # (over 200 s here: the full suite runs it)
def test_packed_results_json_equals_separate_runs(name, tiny_root, tmp_path):
    """Reference: runner.run of each member alone. The pack evaluates all members at once (test set, batch
    statistics, PreciseBN on each member's own batches, the variable-length suite); every number in each
    member's results.json must match its run's: accuracies exactly, losses to 1e-8."""
    model, norm, kw = EVALUATED[name]
    split = kw.get("split", "fixed")
    cfg = config(tiny_root, model, norm, pack=PackConfig(seeds=[0, 1], mode="packed"),
                 **{k: v for k, v in kw.items() if k != "split"})
    cfg.max_steps, cfg.epochs, cfg.log_every = None, 2, 10
    cfg.data.subset, cfg.data.split = 160, split
    with torch_dtype(torch.float64):
        runner.run(cfg, tmp_path / "pack")
        for seed in (0, 1):
            want = _numbers(runner.run(replace(cfg, seed=seed, pack=PackConfig()), tmp_path / f"seed{seed}"))
            got = json.loads((tmp_path / f"pack/seed={seed}/results.json").read_text())
            assert got["packed"]["mode"] == "packed"
            have = _numbers(got)
            # the batch-statistics numbers were computed: the statistics suite's, or (under a variable-length
            # design, which runs its own question's passes only) the design's
            design = cfg.varlen.design if cfg.varlen.enabled else None
            marker = {None: "test_acc_precise_bn", "length": "test_acc_by_length_precise_bn",
                      "padding": "test_acc_heavy_pad_train_mode"}[design]
            assert have.keys() == want.keys() and any(k.startswith(marker) for k in want)
            for key in want:
                assert have[key] == pytest.approx(want[key], rel=0, abs=TOL), key


def test_where_packing_loses_the_members_run_one_after_another(tiny_root, tmp_path):
    """Reference: the bench's crossover (pack/limits.json's "cpu" table, pack.plan.pack_limits): a CNN at
    batch 64 is not packed under pack.mode=auto, and its members are written exactly as a pack's are."""
    from normbench.pack.plan import packs_faster

    cfg = config(tiny_root, "cnn", "gn", pack=PackConfig(seeds=[0, 1]), batch_size=64)
    cfg.max_steps = 3
    assert not packs_faster(cfg) and packs_faster(replace(cfg, batch_size=4))
    assert not packs_faster(replace(cfg, batch_size=4, pack=PackConfig(seeds=[0])))  # one member: nothing to pack
    summary = runner.run(cfg, tmp_path)
    assert [m["name"] for m in summary["members"]] == ["seed=0", "seed=1"]
    for seed in (0, 1):
        res = json.loads((tmp_path / f"seed={seed}/results.json").read_text())
        assert res["packed"]["mode"] == "sequential" and res["config"]["seed"] == seed and res["status"] == "completed"
    assert json.loads((tmp_path / "pack.json").read_text())["names"] == ["seed=0", "seed=1"]


@pytest.mark.parametrize("model,norm", [("mlp", "bn"), ("cnn", "brn"), ("rnn", "ln")])
def test_a_pack_scores_every_member_as_the_member_alone(model, norm, tiny_root):
    """Reference: evaluate.evaluate on each member model. A pack evaluates all members in one pass through
    its packed forward, in eval mode and with batch statistics, at small and large batches; where its
    limit says so (large batches) it scores them member by member instead."""
    from normbench.pack.model import unpack
    from normbench.train.evaluate import evaluate

    cfg = config(tiny_root, model, norm, pack=PackConfig(seeds=[0, 1, 2]))
    with torch_dtype(torch.float64):
        splits = data.load(cfg.data, torch.device("cpu"))
        pack = pack_members(cfg)
        device, make = runner.setup(pack[0][1])
        models = [runner.build_model(m, make, splits, device, {}) for _, m in pack]
        for m in models:
            norms.set_total_steps(m, 10)
        for _ in range(3):  # away from the initial statistics, members apart
            for m in models:
                m.train()(splits.train_x[:8])
        packed_model = PackedModel(models)  # every batch through the packed forward
        for bs, batch_stats in ((4, False), (4, True), (200, False), (200, True)):
            got = evaluate(packed_model, data.batches(splits.test_x, splits.test_y, bs, drop_last=True), batch_stats)
            unpack(packed_model)
            for k, m in enumerate(models):
                want = evaluate(m, data.batches(splits.test_x, splits.test_y, bs, drop_last=True), batch_stats)
                assert got.loss[k] == pytest.approx(want.loss[0], abs=TOL) and got.acc[k] == want.acc[0], (bs, batch_stats, k)
        # Past the pack's limit the members are scored one by one (the reference itself): the packed
        # forward must not run then, and must below it.
        limited = PackedModel(models, packs=lambda batch: batch < 100)
        calls: list[int] = []
        limited.net.register_forward_hook(lambda *a: calls.append(1))
        evaluate(limited, data.batches(splits.test_x, splits.test_y, 200, drop_last=True))
        assert calls == []
        evaluate(limited, data.batches(splits.test_x, splits.test_y, 4, drop_last=True))
        assert calls


def test_members_with_their_own_data_are_scored_on_their_own_batches_unstacked_past_the_limit(tiny_root):
    """Reference: evaluate.evaluate on each member model over its own batches. With each member's own data
    (`each_member` over per-member splits: `MemberStreams`), a pack past its limit scores each member on its
    own stream and never stacks them (the stacked copy of every member's test set was the pack's overhead);
    below the limit it stacks them and runs the packed forward; the numbers are the members' own either way."""
    from normbench.data import MemberSplits
    from normbench.pack.members import MemberStreams, each_member
    from normbench.pack.model import unpack
    from normbench.train.evaluate import evaluate

    cfg = config(tiny_root, "mlp", "bn", pack=PackConfig(seeds=[0, 1]))
    with torch_dtype(torch.float64):
        splits = data.load(cfg.data, torch.device("cpu"))
        n = len(splits.test_x) // 2 * 2  # each member half the test set, its own
        own = tuple(replace(splits, test_x=splits.test_x[k:n:2], test_y=splits.test_y[k:n:2]) for k in range(2))
        pack = pack_members(cfg)
        device, make = runner.setup(pack[0][1])
        models = [runner.build_model(m, make, splits, device, {}) for _, m in pack]
        for k, m in enumerate(models):  # away from the initial statistics, members apart
            m.train()(splits.train_x[8 * k:8 * k + 8])
        limited = PackedModel(models, packs=lambda batch: batch < 100)
        stacked: list[int] = []
        member_batches = limited.member_batches
        limited.member_batches = lambda streams: (stacked.append(1), member_batches(streams))[1]
        for bs, want_stacked in ((200, False), (4, True)):
            stacked.clear()
            batches = each_member(limited, MemberSplits(each=own), lambda s: data.batches(s.test_x, s.test_y, bs))
            assert isinstance(batches, MemberStreams)
            got = evaluate(limited, batches, per_sample=True)
            assert bool(stacked) == want_stacked, bs
            unpack(limited)
            for k, m in enumerate(models):
                want = evaluate(m, data.batches(own[k].test_x, own[k].test_y, bs), per_sample=True)
                assert got.loss[k] == pytest.approx(want.loss[0], abs=TOL) and got.acc[k] == want.acc[0], (bs, k)
                assert torch.equal(got.correct[k], want.correct[0]), (bs, k)


def test_a_per_seed_pack_trains_as_one_computation_with_one_checkpoint(tiny_root, tmp_path):
    """Reference: runner.run of each member alone (`pack.seeds=null seed=s lr=x`). With data.split=per_seed
    each seed has its own validation split and subset; the pack still trains every member (2 seeds x 2 lrs)
    as one computation, checkpointed once in its run directory, each member on its own seed's split. Every
    number in each member's results.json must match its run's. `pack.mode=auto` counts every member."""
    from normbench.pack.plan import decide, packs_faster

    cfg = config(tiny_root, "mlp", "bn", pack=PackConfig(seeds=[0, 1], lrs=[1e-3, 3e-3], mode="packed"))
    cfg.max_steps, cfg.log_every = 5, 5
    cfg.data.subset, cfg.data.split = 200, "per_seed"
    (group,) = decide(cfg, tmp_path, "cpu").groups
    assert group.members == [0, 1, 2, 3] and group.checkpoint_dir == tmp_path and group.packs.size == 4
    # one member per seed is a pack of its seeds now: auto packs it where the limits allow its size
    auto = replace(cfg, pack=PackConfig(seeds=[0, 1, 2]))
    assert decide(auto, tmp_path, "cpu").mode == "packed" and packs_faster(auto)
    with torch_dtype(torch.float64):
        summary = runner.run(cfg, tmp_path / "pack")
        assert summary["status"] == "completed" and len(summary["members"]) == 4
        assert (tmp_path / "pack" / "checkpoint.pt").exists() and not list((tmp_path / "pack").glob("*/checkpoint.pt"))
        accs = set()
        for lr in (1e-3, 3e-3):
            for seed in (0, 1):
                alone = replace(cfg, seed=seed, lr=lr, pack=PackConfig())
                want = _numbers(runner.run(alone, tmp_path / f"lr={lr:g},seed={seed}"))
                got = json.loads((tmp_path / f"pack/lr={lr:g},seed={seed}/results.json").read_text())
                assert got["config"]["data"]["split"] == "per_seed" and got["packed"]["mode"] == "packed"
                have = _numbers(got)
                assert have.keys() == want.keys() and {"test_acc", "val_acc"} <= want.keys()
                for key in want:
                    assert have[key] == pytest.approx(want[key], rel=0, abs=TOL), key
                accs.add((got["val_acc"], got["test_acc"]))
        assert len(accs) > 1


def test_cuda_packing_limits_come_from_the_gpu_bench(tmp_path, monkeypatch):
    """Reference: bench.packed.derive_limits on hand-made bench rows (the largest batch at which every
    S > 1 packed faster, and the largest batch x S that did), written by bench.packed.with_limits into the
    limits file's "cuda" entry as scripts/gpu_check.sh does, and pack/plan.py reading them for CUDA:
    without a table every CUDA pack of 2+ members packs; with one, the measured limits decide; the CPU's
    table is carried over unchanged."""
    from normbench.bench.packed import derive_limits, with_limits
    from normbench.pack import plan

    def row(batch, members, speedup):
        return {"model": "cnn", "batch_size": batch, "members": members, "speedup": {"median": speedup}}

    rows = [row(2, 5, 2.0), row(2, 16, 3.0), row(8, 5, 1.5), row(8, 16, 0.9), row(64, 5, 0.8)]
    assert derive_limits(rows) == {"cnn": [8, 40]}  # 8 x 16 = 128 lost; 8 x 5 = 40 won
    cfg = Config(model=ModelConfig(name="cnn"), batch_size=8, pack=PackConfig(seeds=list(range(16))))
    cpu = plan.pack_limits("cpu")
    limits = tmp_path / "limits.json"
    limits.write_text(with_limits("cuda", None))  # as shipped before a GPU bench: "cuda": null
    monkeypatch.setattr(plan, "LIMITS_FILE", limits)
    assert plan.pack_limits("cuda") is None and plan.packs_faster(cfg, "cuda")  # nothing measured: pack
    limits.write_text(with_limits("cuda", derive_limits(rows)))  # what gpu_check.sh leaves in $OUT
    assert json.loads(limits.read_text()) == {"cpu": {k: list(v) for k, v in cpu.items()}, "cuda": {"cnn": [8, 40]}}
    assert plan.pack_limits("cuda") == {"cnn": (8, 40)} and plan.pack_limits("cpu") == cpu
    assert not plan.packs_faster(cfg, "cuda")  # 8 x 16 = 128 > 40
    assert plan.packs_faster(replace(cfg, pack=PackConfig(seeds=[0, 1, 2, 3, 4])), "cuda")


def test_packing_limits_ship_with_the_package():
    """Reference: pyproject.toml's [tool.setuptools.package-data] (the patterns, globbed in the package
    directory, that a regular `pip install .` copies besides the modules) and importlib.resources (how an
    installed package finds its data): the one limits file is there, a package-data pattern matches it, it
    is the file plan.pack_limits reads, and it holds docs/packing.md's CPU table (batch <= 64 for the MLP,
    batch <= 8 and batch x S <= 40 for the CNN, batch <= 8 for the RNN, the Transformer and the residual CNN) and nothing measured elsewhere yet."""
    import ast
    from importlib import resources
    from pathlib import Path

    from normbench.pack import plan

    shipped = resources.files("normbench.pack") / "limits.json"
    assert shipped.is_file() and Path(str(plan.LIMITS_FILE)) == Path(str(shipped))
    # The patterns are the checkout's, matched in its source tree: the installed package (site-packages
    # under a regular install) has no pyproject.toml beside it
    checkout = Path(__file__).resolve().parents[1]
    package = checkout / "normbench"
    text = (checkout / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-data]\n", 1)[1].split("\n[", 1)[0]
    line = next(ln for ln in section.splitlines() if ln.startswith("normbench ="))
    patterns = ast.literal_eval(line.split("=", 1)[1].strip())
    matched = {p.relative_to(package).as_posix() for pattern in patterns for p in package.glob(pattern)}
    assert "pack/limits.json" in matched, (patterns, "pack/limits.json")
    assert set(json.loads(shipped.read_text())) >= {"cpu", "cuda"}
    assert plan.pack_limits("cpu") == {"mlp": (64, None), "cnn": (8, 40), "rnn": (8, None),
                                       "transformer": (8, None), "resnet": (8, None)}
    assert plan.pack_limits("mps") is None


@pytest.mark.parametrize("batch", [2, 64])
def test_one_member_recurrence_is_torchs_rnn(batch):
    """Reference: torch's nn.RNN (tanh, one layer, batch first). The pack's recurrence run for a single
    member (`models.recurrence.one_member`, which `cells.TorchRNN` trains with on the CPU up to batch 64) gives
    the same outputs and the same gradients of input and every parameter: to 1e-12 in float64, to 1e-4 in
    float32 (sums of 28 x 64 terms in another order)."""
    from normbench.models.cells import TorchRNN
    from normbench.models.recurrence import one_member

    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-4)):  # float32: summation order
        torch.manual_seed(0)
        rnn = TorchRNN(28, 32, batch_first=True).to(dtype)
        x = torch.randn(batch, 28, 28, dtype=dtype, requires_grad=True)
        g = torch.randn(batch, 28, 32, dtype=dtype)
        grads = []
        for f in (lambda: torch.nn.RNN.forward(rnn, x)[0], lambda: one_member(rnn, x)):
            rnn.zero_grad()
            x.grad = None
            out = f()
            (out * g).sum().backward()
            grads.append([out.detach(), x.grad.clone(), *(p.grad.clone() for p in rnn.parameters())])
        for a, b in zip(*grads):
            torch.testing.assert_close(b, a, rtol=tol, atol=tol)


def test_torch_rnn_takes_the_one_member_path_only_where_it_is_faster(monkeypatch):
    """Reference: the rule in cells.TorchRNN: training (autograd on) on the CPU at batch <= 64 goes through
    `one_member`; evaluation and larger batches through torch's kernel."""
    import normbench.models.cells as cells

    calls = []
    monkeypatch.setattr(cells, "one_member", lambda rnn, x: calls.append(len(x)) or torch.nn.RNN.forward(rnn, x)[0])
    rnn = cells.TorchRNN(28, 16, batch_first=True)
    rnn(torch.randn(2, 28, 28))
    rnn(torch.randn(65, 28, 28))
    with torch.no_grad():
        rnn(torch.randn(2, 28, 28))
    assert calls == [2]


def test_one_member_path_trains_the_same_rnn_in_float64(monkeypatch):
    """Reference: the same RNN + LN trained through torch's nn.RNN. Ten AdamW steps at batch 2 in float64,
    once through `one_member` and once with it switched off, end with the same weights to 1e-10 (in
    float32 the two round differently, so a long small-batch run drifts apart as any change of kernel
    makes it do)."""
    import copy

    import normbench.models.cells as cells
    from normbench import models as model_registry

    torch.manual_seed(0)
    net = model_registry.create(ModelConfig(name="rnn", hidden=32), norms.factory("ln"), (1, 28, 28), 10).double()
    x = torch.randn(10, 2, 1, 28, 28, dtype=torch.float64)
    y = torch.randint(0, 10, (10, 2))

    def trained(limit: int) -> torch.nn.Module:
        monkeypatch.setattr(cells, "ONE_MEMBER_MAX_BATCH", limit)
        model = copy.deepcopy(net)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for xb, yb in zip(x, y):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
        return model

    calls = []
    one_member = cells.one_member
    monkeypatch.setattr(cells, "one_member", lambda rnn, xb: calls.append(1) or one_member(rnn, xb))
    fast, slow = trained(32), trained(0)
    assert len(calls) == 10 * len(net.layers)  # every layer, every step: the fast model did take the path
    for (name, a), b in zip(fast.state_dict().items(), slow.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.parametrize("masked", [False, True])
def test_token_batchnorm_is_each_members_batchnorm(masked):
    """Reference: each member's own BatchNorm on tokens (norms.create("bn", C, "seq")) on its own slice, in
    float64. Without a mask the pack runs one kernel over S x C channels of the members' concatenated
    parameters and running statistics; with a mask, each member's own layer. Outputs, the gradients of
    input, scale and shift, the running statistics and the batch count must be the members' own (1e-12), in
    training and in eval mode."""
    import copy

    from normbench.pack.layers import TokenBatchNorm, convert

    torch.manual_seed(0)
    s, n, t, c = 3, 4, 5, 6
    with torch_dtype(torch.float64):
        members = [norms.create("bn", c, "seq") for _ in range(s)]
        for m in members:  # members apart: their own scale, shift and running statistics
            torch.nn.init.normal_(m.weight)
            torch.nn.init.normal_(m.bias)
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2)
        alone = copy.deepcopy(members)
        packed = convert(members)
        assert type(packed) is TokenBatchNorm
        mask = (torch.rand(s, n, t) > 0.3) if masked else None
        for training in (True, False, True):
            x = torch.randn(s, n, t, c, requires_grad=True)
            packed.train(training)
            y = packed(x, mask)
            y.square().sum().backward()
            for k, m in enumerate(alone):
                m.train(training)
                xk = x.detach()[k].clone().requires_grad_()
                yk = m(xk, None if mask is None else mask[k])
                yk.square().sum().backward()
                torch.testing.assert_close(y[k], yk, rtol=1e-12, atol=1e-12)
                torch.testing.assert_close(x.grad[k], xk.grad, rtol=1e-12, atol=1e-12)
                mine = packed.members[k]
                for name in ("weight", "bias"):
                    torch.testing.assert_close(getattr(mine, name).grad, getattr(m, name).grad,
                                               rtol=1e-12, atol=1e-12)
                for name in ("running_mean", "running_var", "num_batches_tracked"):
                    torch.testing.assert_close(getattr(mine, name), getattr(m, name), rtol=1e-12, atol=1e-12)
    with pytest.raises(UserError, match=r"\(1, 6\) has one value per channel"):
        packed.train()(torch.randn(s, 1, 1, c))
