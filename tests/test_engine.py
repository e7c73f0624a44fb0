"""The training loop: schedule, optimizer, divergence, resume, AMP and compile, and the bench's output."""

import json
import time
from dataclasses import replace

import pytest
import torch
from conftest import requires_real_data
from torch import nn

from normbench import models, norms
from normbench.config import Config, ModelConfig, NormConfig
from normbench.data import Splits
from normbench.train.budget import validates
from normbench.train.loop import fit
from normbench.train.optim import make_optimizer, make_schedule
from normbench.train.tracking import NullTracker

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _one_thread():
    """After conftest's 2 threads: on 2 cores busy with other jobs, 2 threads made these runs ~10x slower."""
    torch.set_num_threads(1)


def tiny_splits(n: int = 256, seed: int = 0) -> Splits:
    """Random 1x28x28 images whose class is the brightest of 10 horizontal bands: learnable in a few steps."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 1, 28, 28, generator=g)
    for i, k in enumerate(y.tolist()):
        x[i, 0, 2 * k + 4: 2 * k + 7] += 2.0
    return Splits(x[:192], y[:192], x[192:224], y[192:224], x[224:], y[224:], num_classes=10, name="tiny")


def tiny_cfg(**kw) -> Config:
    base = Config(model=ModelConfig(name="mlp", hidden=32), norm=NormConfig(name="bn"), batch_size=16, epochs=2,
                  log_every=5, progress=False, tensorboard=False, device="cpu")
    return replace(base, **kw)


def build(cfg: Config) -> nn.Module:
    torch.manual_seed(cfg.seed)
    return models.create(cfg.model, norms.factory(cfg.norm.name), (1, 28, 28), 10)


class Recorder(NullTracker):
    def __init__(self):
        self.steps, self.epochs = [], []

    def step(self, step, metrics):
        self.steps.append((step, metrics))

    def epoch(self, epoch, metrics):
        self.epochs.append((epoch, metrics))


@pytest.mark.parametrize("schedule,warmup", [("cosine", 0), ("cosine", 7), ("constant", 5)])
def test_schedule_matches_torch_schedulers(schedule, warmup):
    """Reference: torch's own schedulers, stepped after each update: LinearLR from 1/warmup to 1 over the
    warmup, then CosineAnnealingLR to 0 at the last step (or ConstantLR at factor 1), via SequentialLR."""
    cfg = tiny_cfg(schedule=schedule, warmup_steps=warmup, lr=3e-3)
    total = 40
    lr_at = make_schedule(cfg, total)
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    S = torch.optim.lr_scheduler
    after = S.CosineAnnealingLR(opt, T_max=total - warmup) if schedule == "cosine" else \
        S.ConstantLR(opt, factor=1.0, total_iters=0)
    sched = after if not warmup else S.SequentialLR(
        opt, [S.LinearLR(opt, start_factor=1 / warmup, end_factor=1.0, total_iters=warmup - 1), after],
        milestones=[warmup])
    for step in range(total):
        assert lr_at(step) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9, abs=1e-15), step
        opt.step()
        sched.step()


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_fused_optimizer_matches_for_loop(optimizer):
    """Reference: torch's single-tensor (for-loop) AdamW / SGD on the same gradients."""
    # No BN: a bias before BN gets a ~0 gradient, whose Adam step (m / sqrt(v)) is rounding noise.
    cfg = tiny_cfg(optimizer=optimizer, weight_decay=0.01, norm=NormConfig(name="none"))
    a, b = build(cfg), build(cfg)
    fast = make_optimizer(a, cfg)
    assert fast.defaults.get("fused"), "the engine should pick the fused kernel on the CPU"
    cls = torch.optim.AdamW if optimizer == "adam" else torch.optim.SGD
    extra = {"momentum": cfg.momentum} if optimizer == "sgd" else {}
    slow = cls(b.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=False, **extra)
    x, y = tiny_splits().train_x[:16], tiny_splits().train_y[:16]
    for _ in range(5):
        for net, opt in ((a, fast), (b, slow)):
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")


def test_logs_every_window_and_trains():
    """Reference: the log schedule (every `log_every` steps and at each epoch's last step, so no window
    spans an evaluation) and the loss falling."""
    cfg = tiny_cfg(epochs=3, log_every=5)
    rec = Recorder()
    out = fit(build(cfg), tiny_splits(), cfg, rec, CPU)
    total = 3 * (192 // 16)
    assert out.status == "completed" and out.steps == total and out.epochs_done == 3
    per_epoch = 192 // 16
    assert [s for s, _ in rec.steps] == [e * per_epoch + k for e in range(3) for k in (5, 10, 12)]
    lr_at = make_schedule(cfg, total)
    for step, m in rec.steps:
        assert m["lr"] == lr_at(step - 1)  # the rate the window's last update used
        assert 0 <= m["acc/train"] <= 1 and m["throughput/samples_per_s"] > 0
    assert rec.steps[-1][1]["loss/train"] < rec.steps[0][1]["loss/train"]
    assert [e for e, _ in rec.epochs] == [1, 2, 3]
    assert set(out.history[0]) == {"epoch", "step", "loss/val", "acc/val", "train_samples_per_s"}


class SlowStep(nn.Module):
    """Wraps a model; each training forward pass sleeps `seconds`, so no step is faster than that."""

    def __init__(self, net: nn.Module, seconds: float):
        super().__init__()
        self.net, self.seconds = net, seconds

    def forward(self, x, lengths=None):
        if self.training and torch.is_grad_enabled():
            time.sleep(self.seconds)
        return self.net(x)


def test_throughput_never_counts_steps_from_before_an_evaluation(monkeypatch):
    """Reference: a floor on each step's time (a 20 ms sleep) bounds any honest window's throughput by
    batch / 20 ms; a slow validation (0.5 s) between epochs must not be subtracted from a window that
    also holds steps from before it (the bug: those steps' time was lost, ~2x too high here)."""
    import normbench.train.loop as loop

    real = loop.evaluate

    def slow_evaluate(*a, **kw):
        time.sleep(0.5)
        return real(*a, **kw)

    monkeypatch.setattr(loop, "evaluate", slow_evaluate)
    cfg = tiny_cfg(epochs=3, log_every=8)  # 12 steps per epoch: windows of 8 would straddle epochs
    rec = Recorder()
    fit(SlowStep(build(cfg), 0.02), tiny_splits(), cfg, rec, CPU)
    ceiling = cfg.batch_size / 0.02
    speeds = [m["throughput/samples_per_s"] for _, m in rec.steps]
    assert len(speeds) == 6 and max(speeds) <= ceiling * 1.02, (speeds, ceiling)


class NanAt(nn.Module):
    """Wraps a model; its logits become NaN from training step `at` (1-based) on."""

    def __init__(self, net: nn.Module, at: int):
        super().__init__()
        self.net, self.at, self.calls = net, at, 0

    def forward(self, x, lengths=None):
        out = self.net(x)
        if self.training:
            self.calls += 1
            if self.calls >= self.at:
                out = out * float("nan")
        return out


@pytest.mark.parametrize("at", [1, 7, 10, 13])
def test_divergence_step_is_exact(at):
    """Reference: the step whose loss first became NaN, inside a log window or on its edge: the loop reads
    losses once per window (log_every=5) and still names that step, and records it as the run's steps."""
    cfg = tiny_cfg(log_every=5)
    out = fit(NanAt(build(cfg), at), tiny_splits(), cfg, NullTracker(), CPU)
    assert out.status == "diverged" and out.diverged_step == out.steps == at


@pytest.mark.parametrize("epochs,validations", [(54, 10), (10, 3), (7, 7), (3, 10), (190, 10)])
def test_validations_spread_evenly_over_the_run(epochs, validations):
    """Reference: the arithmetic of `validations`: min(epochs, validations) passes, the last epoch's always,
    the k-th after epoch ceil(k x epochs / validations)."""
    at = [e + 1 for e in range(epochs) if validates(e, epochs, validations)]
    n = min(epochs, validations)
    assert at == [-(-k * epochs // n) for k in range(1, n + 1)] and at[-1] == epochs
    assert [e + 1 for e in range(epochs) if validates(e, epochs, None)] == list(range(1, epochs + 1))


def test_fewer_validations_train_the_same_model():
    """Reference: the same run validated after every epoch: with validations=2 of 5 epochs it trains to the
    same weights and losses (validation reads, never trains), its history holds epochs 3 and 5 only
    (ceil(k x 5 / 2)), with the every-epoch run's numbers, and the tracker sees those two."""
    cfg = tiny_cfg(epochs=5)
    every, every_model = Recorder(), build(cfg)
    ref = fit(every_model, tiny_splits(), cfg, every, CPU)
    fewer, fewer_model = Recorder(), build(cfg)
    out = fit(fewer_model, tiny_splits(), replace(cfg, validations=2), fewer, CPU)
    for p, q in zip(every_model.state_dict().values(), fewer_model.state_dict().values()):
        assert torch.equal(p, q)
    assert [e["epoch"] for e in out.history] == [3, 5] and out.epochs_done == 5 and out.steps == ref.steps
    strip = lambda h: {k: v for k, v in h.items() if k != "train_samples_per_s"}  # noqa: E731
    assert [strip(h) for h in out.history] == [strip(ref.history[2]), strip(ref.history[4])]
    assert [e for e, _ in fewer.epochs] == [3, 5] and len(every.epochs) == 5


def test_resume_is_bit_identical(tmp_path):
    """Reference: an unbroken 3-epoch run; a run stopped after epoch 1 and resumed must match it exactly."""
    cfg = replace(tiny_cfg(epochs=3), model=ModelConfig(name="mlp", hidden=32, dropout=0.3))
    splits = tiny_splits()
    full = build(cfg)
    ref = fit(full, splits, cfg, NullTracker(), CPU, checkpoint=tmp_path / "a.pt")

    class StopAtEpoch2(NullTracker):
        def epoch(self, epoch, metrics):
            if epoch == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit(build(cfg), splits, cfg, StopAtEpoch2(), CPU, checkpoint=tmp_path / "b.pt")
    torch.manual_seed(1234)  # the resumed process starts with other RNG state; the checkpoint restores it
    resumed_model = build(cfg)
    resumed = fit(resumed_model, splits, cfg, NullTracker(), CPU, checkpoint=tmp_path / "b.pt", resume=True)
    for (name, p), q in zip(full.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(p, q), name
    strip = lambda h: [{k: v for k, v in e.items() if k != "train_samples_per_s"} for e in h]  # noqa: E731
    assert strip(resumed.history) == strip(ref.history) and resumed.steps == ref.steps


def test_amp_bf16_on_cpu():
    """Reference: the fp32 run; with amp the linear layers compute in bf16 and training still converges."""
    cfg = tiny_cfg(epochs=3, amp=True)
    net = build(cfg)
    dtypes = set()
    net.net[1].register_forward_hook(lambda m, i, o: dtypes.add(o.dtype))
    out = fit(net, tiny_splits(), cfg, NullTracker(), CPU)
    ref = fit(build(cfg), tiny_splits(), replace(cfg, amp=False), NullTracker(), CPU)
    assert torch.bfloat16 in dtypes and out.status == "completed"
    assert out.history[-1]["acc/val"] >= ref.history[-1]["acc/val"] - 0.15
    assert all(p.dtype == torch.float32 for p in net.parameters())  # master weights stay fp32


def test_compile_true_trains_the_compiled_model_to_the_eager_losses(monkeypatch):
    """Reference: the same run with compile=false. With compile=true the engine steps the model that
    torch.compile returned (counted here) and every step's loss matches eager's to float32 tolerance."""
    compiled = []
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, **kw: compiled.append(m) or real(m, **kw))
    losses = {}
    for on in (False, True):
        cfg = tiny_cfg(epochs=1, max_steps=12, log_every=1, compile=on, model=ModelConfig(name="mlp", hidden=16))
        rec = Recorder()
        net = build(cfg)
        out = fit(net, tiny_splits(), cfg, rec, CPU)
        assert out.status == "completed"
        losses[on] = [m["loss/train"] for _, m in rec.steps]
        assert len(compiled) == int(on) and (not on or compiled[0].member_models == (net,))  # the run: one member
    torch.testing.assert_close(torch.tensor(losses[True]), torch.tensor(losses[False]), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_amp_compile_cudnn_benchmark():
    """Reference: the same run on the CPU; on CUDA with every option on it trains to similar accuracy."""
    cfg = tiny_cfg(epochs=3, amp=True, compile=True, model=ModelConfig(name="cnn", channels=[8, 16], hidden=32))
    splits = tiny_splits()
    gpu = Splits(*(t.cuda() for t in (splits.train_x, splits.train_y, splits.val_x, splits.val_y,
                                      splits.test_x, splits.test_y)), num_classes=10, name="tiny")
    out = fit(build(cfg).cuda(), gpu, cfg, NullTracker(), torch.device("cuda"))
    ref = fit(build(cfg), splits, replace(cfg, amp=False, compile=False), NullTracker(), CPU)
    assert torch.backends.cudnn.benchmark and out.status == "completed"
    assert out.history[-1]["acc/val"] >= ref.history[-1]["acc/val"] - 0.15


def test_bench_lrs_section_times_own_lrs_against_one(tmp_path):
    """Reference: the output contract of `normbench bench --sections lrs` (a row per batch and pack size,
    both variants timed, their ratio's median within its range), not its timings."""
    from normbench.bench import main

    assert main(["--quick", "--sections", "lrs", "--rounds", "2", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["lrs"]
    assert [(r["batch_size"], r["members"]) for r in rows] == [(2, 3)]
    for r in rows:
        assert r["own_lrs_ms"] > 0 and r["one_lr_ms"] > 0
        assert r["own_over_one"]["min"] <= r["own_over_one"]["median"] <= r["own_over_one"]["max"]
    assert "own / one" in (tmp_path / "bench.md").read_text()


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
@requires_real_data
def test_bench_quick_writes_json_and_markdown(tmp_path):
    """Reference: the output contract of `normbench bench` (sections, rows, ratios), not its timings."""
    from normbench.bench import main

    assert main(["--quick", "--sections", "loop,norms,cells", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    assert {"command", "device", "threads", "versions", "loop", "norms", "cells"} <= set(report)
    assert {(r["model"], r["batch_size"]) for r in report["loop"]} == {
        (m, b) for m in ("mlp", "cnn", "rnn", "transformer", "resnet") for b in (2, 64, 256)}
    for row in report["loop"]:
        for key in ("ratio", "ratio_trackers", "ratio_cpu", "ratio_vs_default_adam"):
            assert row[key]["min"] <= row[key]["median"] <= row[key]["max"] and row[key]["median"] > 0
    covered = {(r["norm"], r["layout"]) for r in report["norms"]}
    from normbench.bench.kernels import LAYERS

    for name in norms.names():
        for layout in norms.get(name).layouts:
            if norms.get(name).reparameterizes:  # timed as the layer it reparameterizes (Linear, Conv2d)
                assert layout not in LAYERS or (f"{name} (layer)", layout) in covered
            else:
                assert name == "none" or (name, layout) in covered
    assert report["cells"]["rows"] or report["cells"]["notes"]
    md = (tmp_path / "bench.md").read_text()
    for title in ("Runner vs hand-written loop", "Norms: forward + backward", "Recurrent placement"):
        assert title in md


@requires_real_data
@pytest.mark.slow
def test_bench_sweep_section(tmp_path):
    """Reference: the sweep section's contract: each variant ran every job and a speed-up is reported."""
    from normbench.bench import main

    assert main(["--quick", "--sections", "sweep", "--out", str(tmp_path)]) == 0
    sweep = json.loads((tmp_path / "bench.json").read_text())["sweep"]
    assert sweep["jobs"] == 2 and sweep["speedup"] > 0
    variants = {"serial, threads=2", "serial, threads=1", "joblib n_jobs=2, threads=1"}
    assert set(sweep["wall_s"]) == set(sweep["train_s"]) == variants


@requires_real_data
def test_time_to_accuracy_script(capsys):
    """Reference: the script's JSON contract; one MLP epoch on FashionMNIST clears a 50% target."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("tta", REPO / "scripts" / "time_to_accuracy.py")
    tta = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tta)
    args = ["--model", "mlp", "--epochs", "1", "--target", "0.5", "--device", "cpu", "--threads", "1"]
    assert tta.main(args) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["reached"] and result["at"]["epoch"] == 1 and result["at"]["test_acc"] >= 0.5
    assert 0 < result["at"]["train_s"] <= result["at"]["wall_s"]


def test_event_file_reads_back(tmp_path):
    """Reference: TensorBoard's own reader (EventAccumulator) sees every scalar at its step, and the text."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from normbench.train.tracking import TensorBoardTracker

    tb = TensorBoardTracker(tmp_path, {"model": {"name": "mlp"}, "batch_size": 2})
    tb.start(10)
    for step in (5, 10):
        tb.step(step, {"loss/train": 1.0 / step, "lr": 0.1 * step})
    tb.epoch(1, {"epoch": 1, "step": 10, "acc/val": 0.5})
    tb.finish({"test_acc": 0.75, "val_acc": 0.5})
    tb.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    scalars = lambda tag: [(e.step, pytest.approx(e.value)) for e in acc.Scalars(tag)]  # noqa: E731
    assert scalars("loss/train") == [(5, 0.2), (10, 0.1)] and scalars("lr") == [(5, 0.5), (10, 1.0)]
    assert scalars("acc/val") == [(10, 0.5)] and "epoch" not in acc.Tags()["scalars"]  # bookkeeping: no card
    assert scalars("final/test_acc") == [(10, 0.75)]
    assert "config/text_summary" in acc.Tags()["tensors"]


@pytest.mark.parametrize("shuffle,drop_last", [(True, True), (True, False), (False, True), (False, False)])
def test_batches_cover_the_data_once_in_the_seeds_order(shuffle, drop_last):
    """Reference: what an epoch of batches must be, not how it is made: every sample at most once and
    paired with its own label, batches of 8 (the last partial one only without drop_last), in order when
    not shuffled; shuffled, the order is the generator's (same seed, same order; another seed, another)."""
    from normbench.data import batches

    x, y = torch.arange(50.0).view(50, 1, 1, 1).expand(50, 1, 2, 2), torch.arange(50)

    def epoch(seed: int) -> list:
        return list(batches(x, y, 8, shuffle=shuffle, generator=torch.Generator().manual_seed(seed),
                            drop_last=drop_last))

    got = epoch(3)
    assert [len(b[1]) for b in got] == [8] * 6 + ([] if drop_last else [2])
    seen = torch.cat([b[1] for b in got])
    assert len(set(seen.tolist())) == len(seen) == (48 if drop_last else 50)
    for bx, by, lengths in got:
        assert torch.equal(bx[:, 0, 0, 0], by.float()) and lengths is None  # each image with its label
    if shuffle:
        assert torch.equal(seen, torch.cat([b[1] for b in epoch(3)]))
        assert not torch.equal(seen, torch.cat([b[1] for b in epoch(4)]))
        assert not torch.equal(seen, torch.arange(len(seen)))
    else:
        assert torch.equal(seen, torch.arange(len(seen)))


@requires_real_data
@pytest.mark.slow
@pytest.mark.parametrize("study, overrides, epochs, full_steps, passes", [
    ("ghost_batch", ["norm=bn", "norm.ghost_batch=2"], 2, 2 * (500 // 64), 2),  # 2 epochs of 500 images
    # its equal-steps cell, 52 epochs of 7 steps, of which validations=6 are validated
    ("norm_free_regime", ["norm=ln", "epochs=52", "pack.lrs=null", "model.hidden=32"], 52, 52 * (500 // 64), 6),
])
def test_bench_eval_section_projects_the_measured_costs(tiny_root, tmp_path, monkeypatch, study, overrides, epochs,
                                                        full_steps, passes):
    """Reference: the eval section's definition (bench/eval_share.py): a short real run of the shipped
    experiment; its suite and one validation pass (results.json's eval_passes, per pass made) and its
    seconds per step, projected to the shipped budget's steps and passes as train/loop counts them
    (plan_steps: epochs x training images // batch size, or max_steps alone; validates: cfg.validations)."""
    from normbench.bench import eval_share, main

    monkeypatch.setattr(eval_share, "CELLS", [(study, [*overrides, "data.val_size=100"])])
    assert main(["--quick", "--sections", "eval", "--data-root", str(tiny_root), "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "bench.json").read_text())["eval"]
    assert (row["epochs"], row["full_steps"], row["validations"]) == (epochs, full_steps, passes)
    assert row["steps"] == min(20, row["full_steps"])  # the quick run: 20 steps, or the whole budget
    passes_s = row["passes"]
    assert row["suite_s"] == pytest.approx(sum(v for k, v in passes_s.items() if k != "validation"))
    assert "test" in passes_s
    if study == "ghost_batch":
        assert row["members"] == 5 and {"test_acc_train_mode", "test_acc_precise_bn"} <= set(passes_s)
    evaluation = row["suite_s"] + passes * row["validation_s"]
    assert row["share"] == pytest.approx(evaluation / (row["full_steps"] * row["step_ms"] / 1e3 + evaluation))
    assert "Evaluation's share of the shipped studies' runs" in (tmp_path / "bench.md").read_text()


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
def test_bench_fixed_cost_section(tmp_path):
    """Reference: the fixed section's definition: per run, wall - training - evaluation; each run's own
    share from its start to the next run's; the first run's share carries the process's one-time imports,
    so it exceeds the median of the runs between (--quick: 4 runs of 20 steps)."""
    from normbench.bench import main

    assert main(["--quick", "--sections", "fixed", "--out", str(tmp_path)]) == 0
    fixed = json.loads((tmp_path / "bench.json").read_text())["fixed"]
    assert fixed["runs"] == 4 and len(fixed["each_run_fixed_s"]) == 4
    assert fixed["fixed_per_run_s"] == pytest.approx(
        (fixed["wall_s"] - fixed["train_s"] - fixed["eval_s"]) / 4)
    assert 0 < fixed["marginal_s"] < fixed["each_run_fixed_s"][0]
    assert "fixed cost per run" in (tmp_path / "bench.md").read_text()


@pytest.mark.slow  # two trees' processes (~30 s)
@requires_real_data
def test_bench_study_runs_the_baseline_commits_code_beside_this_one(tmp_path):
    """Reference: what the baseline commit (f6bd784) did with a per-seed pack, by its own code: each seed's
    members trained as a computation of their own (2 seeds x 2 cells = 4), where this checkout trains a
    cell's pack as one (2); the members' test accuracies are compared member by member, and the timings
    come with their ratios. Skipped where the checkout lacks the commit (an installed package, a shallow
    clone)."""
    from normbench.bench import headline as study, main

    if study.checkout(study.BASELINE) is None:
        pytest.skip(f"needs a git checkout holding {study.BASELINE}")
    assert main(["--quick", "--sections", "headline", "--out", str(tmp_path), "--data-root", "./data"]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["headline"]
    assert rows["cells"] == list(study.QUICK_CELLS) and rows["members_compared"] == 8
    assert 0 <= rows["max_test_acc_diff"] <= 0.01  # 5 steps: the same models up to float32 reordering
    for part in ("wall (processes)", "training", "evaluation"):
        assert rows[part]["baseline_s"] > 0 and rows[part]["this_s"] > 0 and len(rows[part]["ratios"]) == 1
    md = (tmp_path / "bench.md").read_text()
    assert "Computations: baseline 4, this 2." in md
