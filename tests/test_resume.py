"""Checkpoints and resume: a run killed or interrupted mid-epoch and resumed with `resume=true` ends
exactly where the run that was never interrupted ends (on CPU); Ctrl-C and SIGTERM stop cleanly at a step
(tests/test_interrupts.py: the same in this process, for packs and the variable-length study too)."""

import json
import logging
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import CHILD_ENV, normbench_cli

from normbench.config import ModelConfig, to_dict
from normbench.errors import UserError
from normbench import runner
from normbench.train import guards
from normbench.train.tracking import NullTracker


def metrics(res: dict) -> dict:
    """What must match between an interrupted-and-resumed run and an unbroken one (not the timings)."""
    history = [{k: v for k, v in e.items() if k != "train_samples_per_s"} for e in res["history"]]
    return {k: res[k] for k in ("status", "steps", "epochs_done", "val_acc", "test_loss", "test_acc")} | \
        {"history": history}


def cli_args(tiny_root, run_dir, **extra) -> list[str]:
    base = {"data.root": tiny_root, "data.val_size": 100, "data.download": "false", "threads": 1,
            "progress": "false", "tensorboard": "false", "batch_size": 16, "log_every": 5, "device": "cpu",
            "model": "cnn", "model.channels": "[8,16]", "model.hidden": 32, "epochs": 6,
            "hydra.run.dir": run_dir}
    return [f"{k}={v}" for k, v in {**base, **extra}.items()]


def _default_sigint():
    # A suite started in the background (`pytest &`) hands its children SIGINT as ignored, and Python then
    # installs no KeyboardInterrupt handler: the child gets SIGINT's default disposition, as in a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args, cwd):
    env = dict(CHILD_ENV)
    return subprocess.Popen([sys.executable, "-m", "normbench", "train", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)


def wait_for_epochs(proc, checkpoint, epochs: int, timeout: float = 120) -> float:
    """Wait until `checkpoint` has been written `epochs` times; returns the seconds one epoch took."""
    deadline, stamps, last = time.monotonic() + timeout, [], None
    while len(stamps) < epochs:
        assert proc.poll() is None, f"the run ended before epoch {epochs}: {proc.stderr.read()}"
        assert time.monotonic() < deadline, "no checkpoint appeared"
        mtime = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
        if mtime is not None and mtime != last:
            stamps.append(time.monotonic())
            last = mtime
        time.sleep(0.002)
    return (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1)


def kill_mid_epoch(proc, checkpoint, epochs: int = 6) -> tuple[int, float]:
    """SIGKILL `proc` half an epoch after its second checkpoint; (epochs checkpointed, seconds an epoch).
    Checked, not assumed: the process was alive when the signal went, no checkpoint was written after
    the one seen (so the kill landed inside the next epoch, between two epoch ends), and the run had
    epochs left to train."""
    epoch_s = wait_for_epochs(proc, checkpoint, 2)
    seen = checkpoint.stat().st_mtime_ns
    time.sleep(epoch_s / 2)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert checkpoint.stat().st_mtime_ns == seen, "an epoch ended before the kill landed"
    done = torch.load(checkpoint, weights_only=True)["loop"]["epochs_done"]
    assert 2 <= done < epochs
    return done, epoch_s


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
def test_sigkill_mid_epoch_then_resume_matches_unbroken_run(tiny_root, tmp_path):
    """Reference: the same command never interrupted. SIGKILL (no handler can run) halfway through an
    epoch after two checkpoints; `resume=true` in the same run directory must end bit-identical."""
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    r = normbench_cli("train", *cli_args(tiny_root, unbroken), cwd=tmp_path)
    assert r.returncode == 0, r.stderr

    proc = start(cli_args(tiny_root, broken), tmp_path)
    killed_after, epoch_s = kill_mid_epoch(proc, broken / guards.CHECKPOINT)

    # Nothing half-written: the result says the run did not finish, the checkpoint loads.
    left = json.loads((broken / "results.json").read_text())
    assert left["status"] == "failed" and left["error"].startswith("unfinished")

    r = normbench_cli("train", *cli_args(tiny_root, broken, resume="true"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    a = json.loads((unbroken / "results.json").read_text())
    b = json.loads((broken / "results.json").read_text())
    print(f"killed after {killed_after} epochs (one epoch ~{epoch_s:.2f}s); unbroken test_loss="
          f"{a['test_loss']!r} test_acc={a['test_acc']}; resumed test_loss={b['test_loss']!r} "
          f"test_acc={b['test_acc']}")
    assert metrics(a) == metrics(b)


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
def test_packed_run_killed_mid_epoch_resumes_every_member_bit_identically(tiny_root, tmp_path):
    """The test above, packed: 3 members (pack.seeds) killed after two checkpoints and resumed must end
    as the unbroken pack ends, every member's metrics bit-identical."""
    pack = {"pack.seeds": "[0,1,2]", "pack.mode": "packed"}
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    r = normbench_cli("train", *cli_args(tiny_root, unbroken, **pack), cwd=tmp_path)
    assert r.returncode == 0, r.stderr

    proc = start(cli_args(tiny_root, broken, **pack), tmp_path)
    kill_mid_epoch(proc, broken / guards.CHECKPOINT)
    for seed in (0, 1, 2):
        left = json.loads((broken / f"seed={seed}/results.json").read_text())
        assert left["status"] == "failed" and left["error"].startswith("unfinished")

    r = normbench_cli("train", *cli_args(tiny_root, broken, resume="true", **pack), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for seed in (0, 1, 2):
        a = json.loads((unbroken / f"seed={seed}/results.json").read_text())
        b = json.loads((broken / f"seed={seed}/results.json").read_text())
        assert metrics(a) == metrics(b), seed
    accs = {json.loads((unbroken / f"seed={s}/results.json").read_text())["test_loss"] for s in (0, 1, 2)}
    assert len(accs) == 3  # three members, not one trained three times


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_interrupt_stops_at_a_step_and_resumes_to_the_unbroken_run(sig, code, name, tiny_root, tmp_path):
    """Reference: docs/reliability.md, and the same command never interrupted. Ctrl-C or a `kill` (SIGTERM,
    a container stop) after the first checkpoint: the run stops at its next step with a checkpoint there,
    in one line, no traceback, exit 128 + signal; results.json says interrupted at that step; `resume=true`
    ends bit-identical to the unbroken run, recording the step it resumed from."""
    unbroken, run_dir = tmp_path / "unbroken", tmp_path / "run"
    r = normbench_cli("train", *cli_args(tiny_root, unbroken), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    proc = start(cli_args(tiny_root, run_dir), tmp_path)
    wait_for_epochs(proc, run_dir / guards.CHECKPOINT, 1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"interrupted ({name}) at step" in err and f"resume=true hydra.run.dir={run_dir}" in err
    res = json.loads((run_dir / "results.json").read_text())
    step = res["interrupted"]["step"]
    assert res["status"] == "failed" and res["error"].startswith(f"interrupted ({name}) at step {step}")
    loop = torch.load(run_dir / guards.CHECKPOINT, weights_only=True)["loop"]
    assert loop["steps"] == step and loop["epochs_done"] >= 1

    r = normbench_cli("train", *cli_args(tiny_root, run_dir, resume="true"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    resumed = json.loads((run_dir / "results.json").read_text())
    assert metrics(resumed) == metrics(json.loads((unbroken / "results.json").read_text()))
    assert resumed["resumed_at_step"] == [step] and "interrupted" not in resumed


class InterruptAt(NullTracker):
    """Presses Ctrl-C when the loop reports `step` (a log window in the middle of an epoch)."""

    def __init__(self, step: int):
        self.at = step

    def step(self, step, metrics):
        if step == self.at:
            raise KeyboardInterrupt


def test_interrupted_in_process_resumes_to_the_same_metrics(tiny_cfg, tmp_path):
    """Reference: an unbroken run. Interrupted at step 46 (epoch 2 of 3, 31 steps an epoch), resumed."""
    tiny_cfg.epochs, tiny_cfg.max_steps = 3, None
    unbroken = runner.run(tiny_cfg, tmp_path / "a", tracker=NullTracker())
    with pytest.raises(KeyboardInterrupt):
        runner.run(tiny_cfg, tmp_path / "b", tracker=InterruptAt(46))
    left = json.loads((tmp_path / "b/results.json").read_text())
    assert left["status"] == "failed" and "interrupted" in left["error"]
    tiny_cfg.resume = True
    resumed = runner.run(tiny_cfg, tmp_path / "b", tracker=NullTracker())
    assert metrics(resumed) == metrics(unbroken)


@pytest.fixture
def guard_log():
    """What normbench.train.guards logs (the CLI prints it as `normbench: ...`; here it is collected)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("normbench.train.guards")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(old)


def test_resume_without_checkpoint_warns_and_starts_fresh(tiny_cfg, tmp_path, guard_log):
    tiny_cfg.resume = True
    res = runner.run(tiny_cfg, tmp_path / "new", tracker=NullTracker())
    assert res["status"] == "completed"
    assert [r.levelno for r in guard_log] == [logging.WARNING]
    assert "resume=true but" in guard_log[0].getMessage()


def test_resume_of_a_finished_run_redoes_nothing(tiny_cfg, tmp_path, guard_log):
    """Re-running a whole sweep with resume=true must not retrain (nor rewrite) the runs that finished."""
    runner.run(tiny_cfg, tmp_path, tracker=NullTracker())
    before = (tmp_path / "results.json").read_bytes()
    tiny_cfg.resume = True
    again = runner.run(tiny_cfg, tmp_path, tracker=NullTracker())
    assert (tmp_path / "results.json").read_bytes() == before and again["status"] == "completed"
    assert "already finished" in guard_log[0].getMessage()


def test_resume_with_another_config_is_refused(tiny_cfg, tmp_path):
    """A checkpoint trained with other settings would silently mix two runs: refuse, keep the files."""
    runner.run(tiny_cfg, tmp_path, tracker=NullTracker())
    before = (tmp_path / "results.json").read_bytes()
    tiny_cfg.resume, tiny_cfg.lr, tiny_cfg.model = True, 0.1, ModelConfig(name="mlp", hidden=64)
    with pytest.raises(UserError, match=r"another config \(it differs in lr, model.hidden\)"):
        runner.run(tiny_cfg, tmp_path, tracker=NullTracker())
    assert (tmp_path / "results.json").read_bytes() == before
    tiny_cfg.lr, tiny_cfg.model, tiny_cfg.progress, tiny_cfg.threads = 1e-3, ModelConfig(name="mlp", hidden=32), \
        True, 1
    assert guards.config_differences(json.loads(before)["config"], to_dict(tiny_cfg)) == []


def test_unreadable_checkpoint_is_a_user_error(tiny_cfg, tmp_path):
    (tmp_path / guards.CHECKPOINT).write_bytes(b"not a checkpoint")
    tiny_cfg.resume = True
    with pytest.raises(UserError, match="cannot read .*checkpoint.pt"):
        runner.run(tiny_cfg, tmp_path, tracker=NullTracker())


def test_a_checkpoint_of_other_layers_is_one_line(tiny_cfg, tmp_path):
    """Reference: the run's own checkpoint, its model's keys renamed as an older pack's were (`net.layers.*`
    where a pack now keeps the model's own `net.net.layers.*`): resume refuses it with one line, and the
    run's results.json says why (torch's own error is a wall of missing and unexpected keys)."""
    from dataclasses import replace

    runner.run(tiny_cfg, tmp_path, tracker=NullTracker())
    blob = torch.load(tmp_path / guards.CHECKPOINT, weights_only=True)
    blob["model"] = {f"old.{k}": v for k, v in blob["model"].items()}
    torch.save(blob, tmp_path / guards.CHECKPOINT)
    results = json.loads((tmp_path / "results.json").read_text())
    (tmp_path / "results.json").write_text(json.dumps({**results, "status": "failed"}))  # as if cut short
    with pytest.raises(UserError, match="holds a model with other layers than this run builds"):
        runner.run(replace(tiny_cfg, resume=True), tmp_path, tracker=NullTracker())
    assert "other layers" in json.loads((tmp_path / "results.json").read_text())["error"]


def test_a_pack_checkpointed_one_seed_at_a_time_is_refused_in_one_line(tiny_cfg, tmp_path):
    """Reference: the pack's own run, its checkpoint moved where an older normbench kept a data.split=per_seed
    pack's (one computation per seed, checkpointed in each seed's first member's directory). This normbench
    trains every member as one computation: resume refuses that layout in one line, before it writes
    anything; a finished pack resumes to nothing whatever its layout."""
    from dataclasses import replace

    from normbench.config import PackConfig

    cfg = replace(tiny_cfg, pack=PackConfig(seeds=[0, 1], mode="packed"), max_steps=3)
    cfg.data.split = "per_seed"
    runner.run(cfg, tmp_path, tracker=NullTracker())
    (tmp_path / guards.CHECKPOINT).rename(tmp_path / "seed=1" / guards.CHECKPOINT)
    assert runner.run(replace(cfg, resume=True), tmp_path)["status"] == "completed"  # finished: nothing to do
    results = json.loads((tmp_path / "seed=0" / "results.json").read_text())
    (tmp_path / "seed=0" / "results.json").write_text(json.dumps({**results, "status": "failed"}))  # cut short
    with pytest.raises(UserError, match="older pack layout") as e:
        runner.run(replace(cfg, resume=True), tmp_path)
    assert len(str(e.value).splitlines()) == 1
    assert json.loads((tmp_path / "seed=0" / "results.json").read_text())["status"] == "failed"


@pytest.mark.slow  # over 5 s here: the fast loop (plain `pytest`) leaves it to the full suite
def test_sweep_rerun_with_resume_keeps_finished_runs(tiny_root, tmp_path):
    """Reference: the first sweep's files. A preempted sweep is re-run with resume=true: finished runs
    are kept as they are (not retrained), so only unfinished work is redone."""
    sweep = tmp_path / "sweep"
    args = [a for a in cli_args(tiny_root, "x", epochs=1, model="mlp") if not a.startswith(("hydra.", "model."))]
    r = normbench_cli("train", "-m", "norm=bn,ln", *args, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    first = {p: p.read_bytes() for p in sweep.glob("*/results.json")}
    assert len(first) == 2
    r = normbench_cli("train", "-m", "norm=bn,ln", *args, "resume=true", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("already finished") == 2
    assert {p: p.read_bytes() for p in sweep.glob("*/results.json")} == first


def test_killed_after_its_last_step_resumes_without_training_more(tiny_cfg, tmp_path, monkeypatch):
    """Reference: the unbroken run. A run capped by max_steps mid-epoch (3 epochs of 31 steps, capped at
    40: its last checkpoint is after step 40) and stopped during the final test evaluation resumes into
    no new step and no new history entry (the bug: one more step in epoch 3)."""
    tiny_cfg.epochs, tiny_cfg.max_steps = 3, 40
    unbroken = runner.run(tiny_cfg, tmp_path / "a", tracker=NullTracker())
    assert unbroken["steps"] == 40 and len(unbroken["history"]) == 2

    from normbench.regimes import default  # the run's regime: its evaluations are the test suite

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as SIGTERM or Ctrl-C during the test suite

    with monkeypatch.context() as m:
        m.setattr(default, "evaluations", killed)
        with pytest.raises(KeyboardInterrupt):
            runner.run(tiny_cfg, tmp_path / "b", tracker=NullTracker())
    tiny_cfg.resume = True
    resumed = runner.run(tiny_cfg, tmp_path / "b", tracker=NullTracker())
    assert resumed["steps"] == 40
    assert metrics(resumed) == metrics(unbroken)
