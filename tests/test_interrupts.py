"""A signal stops a run at its next step boundary, with a checkpoint there, and `resume=true` continues it
to exactly what the unbroken run gives (normbench/train/interrupts.py, loop.train; docs/reliability.md).

The reference everywhere is the same config trained without interruption, on the CPU: every metric, the
float64 test loss included, must be equal, not close."""

import json
import os
import signal
import time
from dataclasses import replace

import pytest
import torch
from test_resume import metrics

from normbench.config import ModelConfig, PackConfig, VarLenConfig
from normbench import runner
from normbench.train import guards, interrupts
from normbench.train.tracking import NullTracker


class SignalAt(NullTracker):
    """Sends this process `sig` once, at the first log point at or past `step`, or when the loop reports
    epoch `epoch` (after that epoch's validation, before its checkpoint): the signal lands inside the
    loop, as a real one would, and the loop must answer at its next boundary."""

    def __init__(self, sig=signal.SIGTERM, step: int | None = None, epoch: int | None = None):
        self.sig, self.at_step, self.at_epoch = sig, step, epoch

    def step(self, step, metrics):
        if self.at_step is not None and step >= self.at_step:
            self.at_step = None
            os.kill(os.getpid(), self.sig)

    def epoch(self, epoch, metrics):
        if epoch == self.at_epoch:
            os.kill(os.getpid(), self.sig)


@pytest.fixture
def handlers():
    """normbench's handlers for SIGTERM and SIGUSR2 in this process, as the CLI and a SLURM task install
    them; pytest's own handlers come back after."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    interrupts.install(list(saved))
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def _configs(tiny_cfg):
    """(name, config): a plain MLP with dropout (torch's global RNG mid-epoch), a pack of two seeds (each
    member's own batch stream), and the variable-length study's RNN (lengths drawn from the batch stream)."""
    base = replace(tiny_cfg, epochs=3, max_steps=None, model=ModelConfig(name="mlp", hidden=32, dropout=0.25))
    rnn = replace(base, model=ModelConfig(name="rnn", hidden=16, placement="recurrent"), batch_size=10,
                  varlen=VarLenConfig(enabled=True, min_len=6, max_len=10, test_lengths=[10, 14],
                                      batching="bucketed", min_step_samples=5))
    return [("mlp", base), ("pack", replace(base, pack=PackConfig(seeds=[0, 1], mode="packed"))), ("rnn", rnn)]


@pytest.mark.parametrize("which", ["mlp", "pack", "rnn"])
def test_signal_mid_epoch_checkpoints_that_step_and_resumes_identically(which, tiny_cfg, tmp_path, handlers,
                                                                        monkeypatch):
    """Stopped at the first log point past step 45 (500 training samples: 31 steps an epoch at batch 16, a
    log every 5 steps of an epoch, so step 46, 15 into epoch 2; the RNN at batch 10 has 50 an epoch: step
    45), resumed: every metric equals the unbroken run's, and results.json says where it resumed."""
    cfg = dict(_configs(tiny_cfg))[which]
    per_epoch = 500 // cfg.batch_size
    packed = bool(cfg.pack.seeds)
    unbroken = runner.run(cfg, tmp_path / "a", tracker=None if packed else NullTracker())
    if packed:  # a pack makes its members' trackers itself: its first member's sends the signal
        train = runner.loop.train
        monkeypatch.setattr(runner.loop, "train", lambda model, splits, cfgs, trackers, *a, **k: train(
            model, splits, cfgs, [SignalAt(step=45), *trackers[1:]], *a, **k))
    with pytest.raises(interrupts.Interrupted) as stopped:
        runner.run(cfg, tmp_path / "b", tracker=None if packed else SignalAt(step=45))
    monkeypatch.undo()
    k = stopped.value.step
    assert stopped.value.signal == "SIGTERM" and k == (45 if which == "rnn" else 46)
    blob = torch.load(tmp_path / "b" / guards.CHECKPOINT, weights_only=True)
    assert blob["loop"] == {"steps": k, "epochs_done": k // per_epoch, "epoch_steps": k % per_epoch}
    dirs = [tmp_path / "b" / f"seed={s}" for s in cfg.pack.seeds] if packed else [tmp_path / "b"]
    for d in dirs:
        left = json.loads((d / "results.json").read_text())
        assert left["status"] == "failed" and left["interrupted"] == {"signal": "SIGTERM", "step": k}
        assert left["error"].startswith(f"interrupted (SIGTERM) at step {k}, kept in checkpoint.pt; rerun")

    resumed = runner.run(replace(cfg, resume=True), tmp_path / "b", tracker=None if packed else NullTracker())
    if packed:
        for s in cfg.pack.seeds:
            a = json.loads((tmp_path / "a" / f"seed={s}" / "results.json").read_text())
            b = json.loads((tmp_path / "b" / f"seed={s}" / "results.json").read_text())
            assert metrics(b) == metrics(a), s
            assert b["resumed_at_step"] == [k] and a["resumed_at_step"] == [] and "interrupted" not in b
        return
    assert metrics(resumed) == metrics(unbroken)
    assert resumed["resumed_at_step"] == [k] and unbroken["resumed_at_step"] == []
    if which == "rnn":  # the study's own numbers too (lengths drawn again from the epoch's start)
        assert resumed["test_acc_by_length"] == unbroken["test_acc_by_length"]
        assert resumed["step_samples"] == unbroken["step_samples"]


def test_signal_during_validation_stops_at_the_epoch_end(tiny_cfg, tmp_path, handlers):
    """Asked while epoch 1 validates: the run stops at that epoch's checkpoint (step 31, none into epoch 2)
    and resumes to the unbroken run's metrics; SIGUSR2 (SLURM's warning) is handled like SIGTERM."""
    cfg = _configs(tiny_cfg)[0][1]
    unbroken = runner.run(cfg, tmp_path / "a", tracker=NullTracker())
    with pytest.raises(interrupts.Interrupted) as stopped:
        runner.run(cfg, tmp_path / "b", tracker=SignalAt(signal.SIGUSR2, epoch=1))
    assert (stopped.value.signal, stopped.value.step) == ("SIGUSR2", 31)
    assert torch.load(tmp_path / "b" / guards.CHECKPOINT, weights_only=True)["loop"] == {
        "steps": 31, "epochs_done": 1, "epoch_steps": 0}
    resumed = runner.run(replace(cfg, resume=True), tmp_path / "b", tracker=NullTracker())
    assert metrics(resumed) == metrics(unbroken) and resumed["resumed_at_step"] == [31]


def test_twice_interrupted_records_both_resumes(tiny_cfg, tmp_path, handlers):
    """Two interruptions (at the log points of steps 20 and 72), two resumes: `resumed_at_step` lists both,
    the metrics are the unbroken run's."""
    cfg = _configs(tiny_cfg)[0][1]
    unbroken = runner.run(cfg, tmp_path / "a", tracker=NullTracker())
    with pytest.raises(interrupts.Interrupted):
        runner.run(cfg, tmp_path / "b", tracker=SignalAt(step=20))
    with pytest.raises(interrupts.Interrupted):
        runner.run(replace(cfg, resume=True), tmp_path / "b", tracker=SignalAt(step=70))
    resumed = runner.run(replace(cfg, resume=True), tmp_path / "b", tracker=NullTracker())
    assert metrics(resumed) == metrics(unbroken) and resumed["resumed_at_step"] == [20, 72]


class SlowStart(SignalAt):
    """SignalAt whose training first waits `wait` seconds (in its start: inside the training's wall time)."""

    def __init__(self, wait: float, **kw):
        super().__init__(**kw)
        self.wait = wait

    def start(self, total_steps, first_step=0):
        time.sleep(self.wait)


def test_a_resumed_runs_wall_time_counts_its_earlier_process(tiny_cfg, tmp_path, handlers):
    """Reference: wall_s is the whole run's wall time (docs/design.md), and a resumed run is one run. Its
    first process waits 4 s before it is stopped (at the step after 40); the resumed run's wall_s must hold
    those 4 s (its own process alone took ~2 s here), and cover its training and evaluation seconds, which
    count both processes."""
    cfg = _configs(tiny_cfg)[0][1]
    with pytest.raises(interrupts.Interrupted):
        runner.run(cfg, tmp_path / "b", tracker=SlowStart(4.0, step=40))
    first = json.loads((tmp_path / "b" / "results.json").read_text())["wall_s"]
    resumed = runner.run(replace(cfg, resume=True), tmp_path / "b", tracker=NullTracker())
    assert len(resumed["resumed_at_step"]) == 1
    assert 4.0 <= resumed["wall_s"] and first <= resumed["wall_s"]
    assert resumed["wall_s"] >= resumed["train_s"] + resumed["eval_s"]


def test_a_signal_outside_the_loop_or_a_second_one_raises_at_once(handlers):
    """Reference: the module's contract. Outside a training loop there is no step to wait for; inside,
    the first signal waits for the loop, a second one does not (a user pressing Ctrl-C twice)."""
    with pytest.raises(interrupts.Interrupted) as now:
        os.kill(os.getpid(), signal.SIGTERM)
    assert now.value.step is None
    with pytest.raises(interrupts.Interrupted):
        with interrupts.stoppable():
            os.kill(os.getpid(), signal.SIGTERM)
            assert interrupts.pending() is not None and interrupts.pending().signal == "SIGTERM"
            os.kill(os.getpid(), signal.SIGTERM)
    assert interrupts.pending() is None


def test_a_policy_decides_what_the_results_say(tiny_cfg, tmp_path, handlers, monkeypatch):
    """A launcher's policy (here: requeue) is asked once, and results.json says its answer."""
    asked = []

    def policy(name):
        asked.append(name)
        return interrupts.Outcome(True, "requeued with resume=true (requeue 1 of at most 3)")

    monkeypatch.setattr(interrupts, "policy", policy)
    with pytest.raises(interrupts.Interrupted) as stopped:
        runner.run(_configs(tiny_cfg)[0][1], tmp_path, tracker=SignalAt(step=10))
    assert stopped.value.outcome.requeue and asked == ["SIGTERM"]
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["error"] == "interrupted (SIGTERM) at step 10, kept in checkpoint.pt; requeued with resume=true " \
                           "(requeue 1 of at most 3)"


@pytest.mark.parametrize("sig,job,requeues,expect", [
    ("SIGUSR2", "", 0, "preempted or near its time limit: requeued with resume=true (requeue 1 of at most 2)"),
    ("SIGUSR2", "", 2, "preempted or near its time limit, but already requeued 2 times "
                       "(hydra.launcher.max_requeues=2): not requeued; continue it with resume=true"),
    ("SIGTERM", "JobState=COMPLETING Reason=TimeLimit", 1, "at its time limit: requeued with resume=true "
                                                          "(requeue 2 of at most 2)"),
    ("SIGTERM", "JobState=PREEMPTED Reason=None", 0, "preempted: requeued with resume=true"),
    ("SIGTERM", "JobState=COMPLETING Reason=None", 0, "cancelled (scancel): not requeued"),
])
def test_the_slurm_launchers_policy(sig, job, requeues, expect, monkeypatch):
    """Reference: docs/cluster.md's table of faults (what `scontrol show job` says for each, as read on the
    one-node cluster of tests/test_slurm.py). USR2 requeues until the cap; a SIGTERM requeues only when
    SLURM ends the task (time limit, preemption), never after scancel."""
    import hydra_plugins.normbench_slurm as plugin

    monkeypatch.setattr(plugin, "_scontrol_job", lambda: job)
    launcher = plugin.NormbenchSlurmLauncher(max_requeues=2)
    launcher.requeues = requeues
    outcome = launcher._policy(sig)
    assert expect in outcome.then
    assert outcome.requeue == ("requeued with" in expect)


def test_a_failed_tasks_reason_is_its_tracebacks_last_line():
    """Reference: submitit 1.5's message for a task that raised (core.Job.exception: the trace framed by
    22 dashes, then log paths): the sweep's line gives the exception, not a log path."""
    import hydra_plugins.normbench_slurm as plugin

    trace = "Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: interrupted (SIGTERM) at step 3"
    error = RuntimeError(f"Job (task=0) failed during processing with trace:\n{'-' * 22}\n{trace}\n{'-' * 22}\n"
                         "You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:\n"
                         "  - /x/log.err\n  - /x/log.out")
    assert plugin._why(error, None) == "RuntimeError: interrupted (SIGTERM) at step 3"
    assert plugin._why(RuntimeError("one line"), None) == "one line"


def test_two_signals_held_while_a_slurm_task_starts_interrupt_it_once(tmp_path):
    """Reference: POSIX signal masks, and the launcher's handling (normbench_slurm.NormbenchSlurmLauncher.
    __call__): USR2 and SIGTERM both held by HOLD (a preemption that sends both) reach a raising handler one at
    a time, so `release()` raises once, in the `try` that requeues, and `ignore()` discards the other."""
    import subprocess
    import sys

    import hydra_plugins.normbench_slurm as plugin

    task = ("import os, signal\n"
            "os.kill(os.getpid(), signal.SIGUSR2); os.kill(os.getpid(), signal.SIGTERM)  # both held\n"
            "from hydra_plugins.normbench_slurm import ignore, release\n"
            "def stop(signum, frame): raise KeyboardInterrupt(signal.Signals(signum).name)\n"
            "signal.signal(signal.SIGUSR2, stop); signal.signal(signal.SIGTERM, stop)\n"
            "try:\n    release()\nexcept KeyboardInterrupt as e:\n    print('interrupted by', e, flush=True)\n"
            "    ignore()\nprint('requeued', flush=True)\n")
    r = subprocess.run([*plugin.HOLD, sys.executable, "-c", task], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["interrupted by SIGUSR2", "requeued"]


def test_own_srun_arguments_come_before_hold(tmp_path):
    """Reference: submitit's srun line (`srun ... *srun_args python -u -m submitit.core._submit`): a user's
    hydra.launcher.srun_args are srun's options, and HOLD, the program srun runs, always follows them."""
    import hydra_plugins.normbench_slurm as plugin

    executor = plugin.make_executor({"submitit_folder": str(tmp_path), "srun_args": ["--cpu-bind=none"]})
    assert executor._executor.parameters["srun_args"] == ["--cpu-bind=none", *plugin.HOLD]
    assert plugin.make_executor({"submitit_folder": str(tmp_path)})._executor.parameters["srun_args"] == plugin.HOLD


def test_a_signal_sent_while_a_slurm_task_starts_waits_for_its_handler(tmp_path):
    """Reference: POSIX signal masks (a blocked signal stays pending across exec until unblocked). srun starts a
    task through normbench_slurm.HOLD; a USR2 sent while the task's python still imports is held, not fatal
    (its default action), and reaches the handler the task installs before `release()`."""
    import subprocess
    import sys

    import hydra_plugins.normbench_slurm as plugin

    ready = tmp_path / "ready"
    task = ("import os, signal, sys, time, pathlib\n"
            "pathlib.Path(sys.argv[1]).touch()\n"
            "while not pathlib.Path(sys.argv[1] + '.sent').exists(): time.sleep(0.01)\n"  # the task, still starting
            "from hydra_plugins.normbench_slurm import release\n"
            "signal.signal(signal.SIGUSR2, lambda *_: print('handled USR2', flush=True))\n"
            "release()\n"
            "print('after release', flush=True)\n")
    proc = subprocess.Popen([*plugin.HOLD, sys.executable, "-c", task, str(ready)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the task never started"
        time.sleep(0.01)
    proc.send_signal(signal.SIGUSR2)  # USR2's default would end it here
    ready.with_name("ready.sent").touch()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert out.splitlines() == ["handled USR2", "after release"]
