"""One training path for plain runs and packs (loop.train, runner.run): the defects the two copies had,
each against its reference (an unbroken run, the same run alone, or a loop written out by hand)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from normbench import data, models, norms
from normbench.config import Config, DataConfig, ModelConfig, NormConfig, PackConfig
from normbench.errors import UserError
from normbench.regimes import default
from normbench import runner
from normbench.train import loop
from normbench.train.tracking import NullTracker


def cfg_for(tiny_root, **kw) -> Config:
    base = dict(model=ModelConfig(name="mlp", hidden=32), norm=NormConfig(name="bn"),
                data=DataConfig(root=str(tiny_root), val_size=100, download=False),
                batch_size=16, epochs=1, max_steps=10, log_every=5, progress=False, tensorboard=False,
                device="cpu")
    return Config(**{**base, **kw})


def read(path) -> dict:
    return json.loads((path / "results.json").read_text())


def same_numbers(res: dict) -> dict:
    """What an interrupted-and-resumed run must share with an unbroken one (not the timings)."""
    keep = ("status", "steps", "epochs_done", "val_acc", "test_loss", "test_acc", "test_acc_train_mode",
            "train_acc", "train_acc_train_mode", "test_acc_precise_bn", "diverged_step")
    history = [{k: v for k, v in e.items() if k != "train_samples_per_s"} for e in res["history"]]
    return {k: res.get(k) for k in keep} | {"history": history}


class InterruptAt(NullTracker):
    def __init__(self, step: int):
        self.at = step

    def step(self, step, metrics):
        if step >= self.at:
            raise KeyboardInterrupt


def test_a_pack_stopped_in_its_test_suite_is_unfinished_and_resumes_into_its_evaluations(tiny_root, tmp_path,
                                                                                         monkeypatch):
    """Reference: the same pack unbroken. Defect 1: a pack interrupted during its test suite wrote
    "completed" with test_acc null, and resume=true then had nothing to do. Now each member stays failed
    (unfinished) until every number is in, and resuming finishes the evaluations from the checkpoint
    without training again (its recorded training throughput, a timing, comes back unchanged)."""
    cfg = cfg_for(tiny_root, batch_size=8, max_steps=30, pack=PackConfig(seeds=[0, 1], mode="packed"))
    runner.run(cfg, tmp_path / "a")
    unbroken = [read(tmp_path / "a" / f"seed={s}") for s in (0, 1)]

    real = default.evaluations

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C while the study's suite runs

    monkeypatch.setattr(default, "evaluations", stopped)
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, tmp_path / "b")
    left = [read(tmp_path / "b" / f"seed={s}") for s in (0, 1)]
    for res in left:
        assert res["status"] == "failed" and "interrupted" in res["error"], res
        assert res["steps"] == 30  # what training did is kept
    monkeypatch.setattr(default, "evaluations", real)

    resumed = runner.run(replace(cfg, resume=True), tmp_path / "b")
    assert resumed["status"] == "completed"
    for s, want, before in zip((0, 1), unbroken, left):
        got = read(tmp_path / "b" / f"seed={s}")
        assert same_numbers(got) == same_numbers(want)
        assert got["train_samples_per_s"] == before["train_samples_per_s"]  # not trained again
        assert "error" not in got


def test_a_single_run_stopped_in_its_test_suite_resumes_into_its_evaluations(tiny_root, tmp_path, monkeypatch):
    """Reference: the unbroken run. The same rule as for a pack's members, for a plain run."""
    cfg = cfg_for(tiny_root, max_steps=20)
    unbroken = runner.run(cfg, tmp_path / "a", tracker=NullTracker())
    real = default.evaluations
    monkeypatch.setattr(default, "evaluations", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, tmp_path / "b", tracker=NullTracker())
    before = read(tmp_path / "b")
    assert before["status"] == "failed" and before["steps"] == 20
    monkeypatch.setattr(default, "evaluations", real)
    resumed = runner.run(replace(cfg, resume=True), tmp_path / "b", tracker=NullTracker())
    assert same_numbers(resumed) == same_numbers(unbroken)
    assert resumed["train_samples_per_s"] == before["train_samples_per_s"]


DIVERGING = dict(model=ModelConfig(name="mlp", hidden=32), norm=NormConfig(name="none"), optimizer="sgd",
                 batch_size=16, log_every=5, max_steps=30)


@pytest.mark.parametrize("log_every", [1, 5, 7])
def test_a_diverged_runs_steps_do_not_depend_on_how_it_was_trained(log_every, tiny_root, tmp_path):
    """Reference: the definition, `steps` = the step whose loss was non-finite (diverged_step), whatever
    log_every is. Defect 2: alone a run recorded the end of its log window (steps 5, diverged_step 4);
    as a pack member it recorded 4. Now both record the same steps, diverged_step and status."""
    cfg = cfg_for(tiny_root, **{**DIVERGING, "log_every": log_every})
    alone = runner.run(replace(cfg, lr=1e4), tmp_path / "alone", tracker=NullTracker())
    runner.run(replace(cfg, pack=PackConfig(lrs=[1e-3, 1e4], mode="packed")), tmp_path / "pack")
    member = read(tmp_path / "pack" / "lr=10000")
    assert alone["status"] == member["status"] == "diverged"
    assert alone["steps"] == alone["diverged_step"] == member["steps"] == member["diverged_step"]
    assert 1 <= alone["steps"] < 30
    assert member["train_samples_per_s"] > 0 and alone["train_samples_per_s"] > 0
    other = read(tmp_path / "pack" / "lr=0.001")
    assert other["status"] == "completed" and other["steps"] == 30


def test_resuming_a_pack_whose_first_member_diverged_continues_at_the_packs_step(tiny_root, tmp_path,
                                                                                 monkeypatch):
    """Reference: the same pack unbroken. Defect 3: the pack's step and epoch were read from member 0,
    which stops counting when it diverges; a resumed pack restarted at that stale step on top of later
    weights. Member 0 (lr 1e4) diverges in epoch 1; the pack is stopped in epoch 3 and resumed."""
    cfg = cfg_for(tiny_root, **{**DIVERGING, "max_steps": None, "epochs": 4},
                  pack=PackConfig(lrs=[1e4, 1e-3], mode="packed"))
    runner.run(cfg, tmp_path / "a")
    want = read(tmp_path / "a" / "lr=0.001")
    assert read(tmp_path / "a" / "lr=10000")["status"] == "diverged"

    # 31 steps an epoch: step 70 is in epoch 3, after two checkpoints
    real = runner.make_trackers
    monkeypatch.setattr(runner, "make_trackers", lambda *a, **k: InterruptAt(70))
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, tmp_path / "b")
    assert read(tmp_path / "b" / "lr=0.001")["status"] == "failed"
    monkeypatch.setattr(runner, "make_trackers", real)
    runner.run(replace(cfg, resume=True), tmp_path / "b")
    got = read(tmp_path / "b" / "lr=0.001")
    assert same_numbers(got) == same_numbers(want)
    assert same_numbers(read(tmp_path / "b" / "lr=10000")) == same_numbers(read(tmp_path / "a" / "lr=10000"))


def hand_written(cfg: Config, splits, model) -> list[float]:
    """The loop one writes by hand: AdamW (fused), cosine lr to 0, shuffled by a generator of the seed."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
    shuffle, losses, step = torch.Generator().manual_seed(cfg.seed), [], 0
    n, bs = len(splits.train_x), cfg.batch_size
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=shuffle)
        for i in range(n // bs):
            for group in opt.param_groups:
                group["lr"] = cfg.lr * 0.5 * (1 + math.cos(math.pi * step / (cfg.epochs * (n // bs))))
            idx = order[i * bs:(i + 1) * bs]
            loss = F.cross_entropy(model(splits.train_x[idx]), splits.train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
    return losses


class Losses(NullTracker):
    def __init__(self):
        self.losses: list[float] = []

    def step(self, step, metrics):
        self.losses.append(metrics["loss/train"])


@pytest.mark.parametrize("model,norm", [("mlp", "bn"), ("cnn", "gn"), ("rnn", "ln")])
def test_one_member_training_matches_a_hand_written_loop_bit_for_bit(model, norm, tiny_root):
    """Reference: `hand_written` above, 15 lines with nothing of normbench's but the model. The engine's
    loop (one member) must give the same losses at every step and the same weights, bit for bit."""
    small = {"mlp": {"hidden": 32}, "cnn": {"channels": [8, 8], "hidden": 16, "dropout": 0.0},
             "rnn": {"hidden": 16}}[model]
    cfg = cfg_for(tiny_root, model=ModelConfig(name=model, **small), norm=NormConfig(name=norm), epochs=2,
                  max_steps=None, log_every=1)
    splits = data.load(cfg.data, torch.device("cpu"))

    def build():
        torch.manual_seed(cfg.seed)
        return models.create(cfg.model, norms.factory(norm), splits.shape, splits.num_classes)

    mine, theirs = build(), build()
    tracker = Losses()
    out = loop.fit(mine, splits, cfg, tracker, torch.device("cpu"))
    want = hand_written(cfg, splits, theirs)
    assert out.status == "completed" and out.steps == len(want) == 2 * (len(splits.train_x) // 16)
    assert tracker.losses == want  # every step's loss, exactly
    for (k, a), b in zip(mine.state_dict().items(), theirs.state_dict().values()):
        assert torch.equal(a, b), k


def test_a_checkpoint_of_the_old_format_resumes_and_a_newer_one_is_refused(tiny_root, tmp_path):
    """Reference: the unbroken run. A format-1 checkpoint (written before the one loop: the loop's state
    inside the run's one `fit`, one `shuffle` generator) resumes to the same numbers; a format this
    version does not know is one line."""
    cfg = cfg_for(tiny_root, epochs=3, max_steps=None)
    unbroken = runner.run(cfg, tmp_path / "a", tracker=NullTracker())
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, tmp_path / "b", tracker=InterruptAt(40))  # 31 steps an epoch: one checkpoint
    path = tmp_path / "b" / "checkpoint.pt"
    blob = torch.load(path, weights_only=True)
    old = {"model": blob["model"], "optimizer": blob["optimizer"], "fit": blob["members"][0],
           "rng": {"torch": blob["rng"]["torch"], "cuda": blob["rng"]["cuda"], "shuffle": blob["rng"]["shuffles"][0]}}
    assert old["fit"]["steps"] == blob["loop"]["steps"] == 31
    torch.save(old, path)
    resumed = runner.run(replace(cfg, resume=True), tmp_path / "b", tracker=NullTracker())
    assert same_numbers(resumed) == same_numbers(unbroken)

    torch.save({**blob, "format": 99}, path)
    (tmp_path / "b" / "results.json").unlink()
    with pytest.raises(UserError, match="newer normbench"):
        runner.run(replace(cfg, resume=True), tmp_path / "b", tracker=NullTracker())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_pack_asked_for_a_missing_device_records_the_failure_in_every_member(tiny_root, tmp_path):
    """Reference: the single run's contract (a results.json also when setup fails), for each member."""
    cfg = cfg_for(tiny_root, device="cuda", pack=PackConfig(seeds=[0, 1]))
    with pytest.raises(UserError, match="no CUDA device"):
        runner.run(cfg, tmp_path)
    for s in (0, 1):
        res = read(tmp_path / f"seed={s}")
        assert res["status"] == "failed" and "no CUDA device" in res["error"]


def test_a_resumed_pack_keeps_the_mode_its_pack_json_records(tiny_root, tmp_path, monkeypatch):
    """Reference: the same pack unbroken. pack.mode is a runtime key (resume accepts another value, and
    auto decides by device), but a pack trained one member after another keeps its checkpoints in the
    members' directories: resumed with pack.mode=auto, which would pack it here, it must go on as it began."""
    cfg = cfg_for(tiny_root, epochs=3, max_steps=None, pack=PackConfig(seeds=[0, 1], mode="sequential"))
    runner.run(cfg, tmp_path / "a")
    real = runner.make_trackers
    monkeypatch.setattr(runner, "make_trackers", lambda *a, **k: InterruptAt(40))  # in epoch 2 of seed=0
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, tmp_path / "b")
    monkeypatch.setattr(runner, "make_trackers", real)
    assert (tmp_path / "b" / "seed=0" / "checkpoint.pt").exists()
    auto = replace(cfg, resume=True, pack=PackConfig(seeds=[0, 1], mode="auto"))
    runner.run(auto, tmp_path / "b")
    for s in (0, 1):
        got, want = read(tmp_path / "b" / f"seed={s}"), read(tmp_path / "a" / f"seed={s}")
        assert got["packed"]["mode"] == "sequential"
        assert same_numbers(got) == same_numbers(want)


def test_a_callers_tracker_is_closed_when_setup_fails(tiny_root, tmp_path):
    """Reference: the tracker contract (close() once, whatever happens): a validation split larger than
    the data fails while the data loads, before any tracker is made."""
    class Closing(NullTracker):
        closed = 0

        def close(self):
            self.closed += 1

    tracker = Closing()
    cfg = cfg_for(tiny_root, data=DataConfig(root=str(tiny_root), val_size=100_000, download=False))
    with pytest.raises(UserError):
        runner.run(cfg, tmp_path / "run", tracker=tracker)
    assert tracker.closed == 1 and read(tmp_path / "run")["status"] == "failed"


def test_a_per_seed_pack_stopped_in_epoch_2_resumes_from_its_one_checkpoint(tiny_root, tmp_path, monkeypatch):
    """Reference: the same pack unbroken. With data.split=per_seed every member (each on its own seed's
    split) trains in one computation, checkpointed once in the pack's directory: stopped in epoch 2, every
    member is unfinished, and resume continues all of them from that checkpoint to the unbroken numbers."""
    cfg = cfg_for(tiny_root, batch_size=8, epochs=2, max_steps=None,
                  data=DataConfig(root=str(tiny_root), val_size=100, subset=160, download=False, split="per_seed"),
                  pack=PackConfig(seeds=[0, 1], lrs=[1e-3, 3e-3], mode="packed"))
    names = [f"lr={lr:g},seed={s}" for lr in (1e-3, 3e-3) for s in (0, 1)]
    runner.run(cfg, tmp_path / "a")
    unbroken = {n: read(tmp_path / "a" / n) for n in names}

    real = runner.make_trackers  # 20 steps an epoch: step 30 is in epoch 2
    monkeypatch.setattr(runner, "make_trackers",
                        lambda c, *a, **k: InterruptAt(30) if c.seed == 1 else real(c, *a, **k))
    with pytest.raises(KeyboardInterrupt):
        runner.run(cfg, tmp_path / "b")
    monkeypatch.setattr(runner, "make_trackers", real)
    before = {n: read(tmp_path / "b" / n) for n in names}
    assert {r["status"] for r in before.values()} == {"failed"}
    assert (tmp_path / "b" / "checkpoint.pt").exists() and not list((tmp_path / "b").glob("*/checkpoint.pt"))
    assert runner.run(replace(cfg, resume=True), tmp_path / "b")["status"] == "completed"
    for n in names:
        got = read(tmp_path / "b" / n)
        assert same_numbers(got) == same_numbers(unbroken[n]), n
        assert got["resumed_at_step"] == [20], n
