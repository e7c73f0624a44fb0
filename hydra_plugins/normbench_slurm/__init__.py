"""normbench's SLURM launcher: hydra-submitit's, with the two things a sweep of long runs needs.

- **It waits for every task.** hydra-submitit collects a job array's results in array order and raises at
  the first task that died, so `normbench train -m` returned while later tasks still ran. This launcher
  lets every task of the array end first, then raises one `normbench.errors.TasksFailed` naming each task
  that did not complete (the CLI says one line per task, with the command that resumes it); the completed
  tasks' results are already in their run directories.
- **Preemption and time limits are resumes.** submitit's own handler requeues a signalled task at once
  with the same arguments, so the run started over. Here the task's signals go to `normbench.train.interrupts`:
  on SLURM's USR2 (sent `signal_delay_s` before the time limit, or by a preempting scheduler), and on a
  SIGTERM that SLURM sends for a time limit or a preemption, the run stops at its next step with a
  checkpoint there, and the task requeues itself with `resume=true` (at most `max_requeues` times).
  A SIGTERM from `scancel` is a cancel: the task ends, listed with its resume command.
- **At any moment of the task.** srun starts each task's python through `HOLD`, which blocks these signals
  before anything is imported; a signal that comes while the task starts (python and torch import, for
  seconds on a busy node; a preemption comes at any time, and SLURM may send the time-limit USR2 up to a
  minute early) waits, pending, until normbench's handler is in place (`release`), then requeues the task
  with `resume=true`: a run with no checkpoint yet starts over.

Selected by normbench/configs/hydra/launcher/slurm.yaml (its schema: `NormbenchSlurmConf`).

Installed without the `slurm` extra (no hydra-submitit-launcher), this module still imports: Hydra imports
every module under hydra_plugins at startup, and a failed import is a warning on every command. The preset
then composes as before, and its launcher, set up for a sweep, stops it with one line naming the extra
(`MISSING_EXTRA`).
"""


import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.plugins.launcher import Launcher

from normbench.errors import UserError

try:
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

    MISSING_EXTRA: UserError | None = None
except ModuleNotFoundError as e:  # installed without the `slurm` extra; any other failure is a broken install
    if not (e.name or "").startswith(("hydra_plugins.hydra_submitit_launcher", "submitit")):
        raise
    MISSING_EXTRA = UserError("the slurm launcher (hydra/launcher=slurm) needs hydra-submitit-launcher",
                              "pip install 'normbench[slurm]'")

    class _Unavailable(Launcher):
        """SlurmLauncher's stand-in: a sweep stops at the launcher's setup, before any run starts."""

        def __init__(self, **params):
            self.params = params

        def setup(self, *, hydra_context, task_function, config) -> None:
            raise MISSING_EXTRA

        def launch(self, job_overrides, initial_job_idx):
            raise MISSING_EXTRA

    SlurmQueueConf, SlurmLauncher = object, _Unavailable  # the classes below are defined on these stand-ins

log = logging.getLogger(__name__)

# What a SIGTERM's job says in `scontrol show job` when SLURM, not a user, ends the task
SLURM_ENDS = {"Reason=TimeLimit": "at its time limit", "JobState=PREEMPTED": "preempted"}
SIGNALS = (signal.SIGUSR2, signal.SIGTERM)  # SLURM's preemption and time-limit signals
# What srun runs the task's command (submitit's python) through: a python without site-packages (~10 ms) that
# blocks SIGNALS and execs the command, which inherits the block. A blocked signal is not lost: it waits until
# the task, its handler installed, unblocks it (`release`); until then submitit's handler never sees it either.
HOLD = [sys.executable, "-I", "-S", "-c", ("import _signal, os, sys; _signal.pthread_sigmask(_signal.SIG_BLOCK, "
                                          "{_signal.SIGUSR2, _signal.SIGTERM}); os.execv(sys.argv[1], sys.argv[1:])")]


@dataclass
class NormbenchSlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.normbench_slurm.NormbenchSlurmLauncher"
    # How many times one task may requeue itself after preemption or a time limit; past it the task ends
    # failed, saying so, and `resume=true` continues it by hand.
    max_requeues: int = 3
    # srun options of your own; normbench_slurm.HOLD always follows them (make_executor), so that SLURM's
    # signals wait for the task's handler
    srun_args: list[str] = field(default_factory=list)


# Without the extra, a plain node: slurm.yaml's keys compose onto it (hydra-submitit's schema is not there).
ConfigStore.instance().store(group="hydra/launcher", name="normbench_slurm_schema", provider="normbench",
                             node=NormbenchSlurmConf if MISSING_EXTRA is None else {"_target_": NormbenchSlurmConf._target_})


class NormbenchSlurmLauncher(SlurmLauncher):
    def __init__(self, max_requeues: int = 3, **params):
        super().__init__(**params)
        self.max_requeues, self.requeues = max_requeues, 0  # pickled into the task: its count travels along

    def launch(self, job_overrides, initial_job_idx):
        """The sweep's tasks as one job array; once every task has ended, their results, or one TasksFailed
        naming each task that did not complete."""
        from normbench.errors import TasksFailed

        jobs = self.submit(job_overrides, initial_job_idx)
        for job in jobs:  # every task of the array ends (its result written, or SLURM says it died)
            job.wait()
        errors = [_error(job) for job in jobs]
        failed = [(initial_job_idx + k, job.job_id, job.state, list(overrides), _why(error, job))
                  for k, (job, overrides, error) in enumerate(zip(jobs, job_overrides, errors))
                  if error is not None]
        if failed:
            raise TasksFailed(failed, str(self.config.hydra.sweep.dir))
        return [job.results()[0] for job in jobs]

    def submit(self, job_overrides, initial_job_idx) -> list:
        """The sweep's tasks submitted as one job array, as hydra-submitit's SlurmLauncher.launch submits them
        (the same executor, parameters and task arguments: tests/test_private_apis.py compares the two), its
        submitit jobs returned. hydra-submitit's launch builds its executor inside and reads each task's
        result in array order, raising at the first that died, with no way to wait for the others: hence
        this copy, through submitit's and Hydra's public API."""
        from hydra.core.singleton import Singleton
        from hydra.core.utils import filter_overrides

        executor = make_executor(self.params)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        log.info(f"Submitit 'slurm' sweep output dir : {sweep_dir}")
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        tasks = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            tasks.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        return executor.map_array(self, *zip(*tasks))

    def __call__(self, sweep_overrides, job_dir_key, job_num, job_id, singleton_state):
        """One task, on its node: the run, stopped at a step boundary by SLURM's signals and requeued."""
        from normbench.train import interrupts

        # Replaces submitit's handlers (USR2: requeue at once with the same arguments; SIGTERM: ignored).
        interrupts.install(list(SIGNALS))
        interrupts.policy = self._policy
        try:
            release()  # a signal held while the task started raises here: requeued, the run starts over
            result = super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
        except interrupts.Interrupted as e:
            if e.outcome.requeue:
                self._requeue(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
            # an Exception, so submitit records it as the task's result and the sweep lists it
            raise RuntimeError(f"interrupted ({e.signal}) {e.where}; {e.outcome.then}") from None
        ignore()  # the run is over: a signal now would only lose its result
        return result

    def _policy(self, signal_name: str):
        """Requeue, or end? Asked once, as the run records its interruption."""
        from normbench.train.interrupts import Outcome

        by_hand = "continue it with resume=true and the same hydra.sweep.dir"
        why = slurm_reason(signal_name)
        if why is None:
            return Outcome(False, f"cancelled (scancel): not requeued; {by_hand}" if signal_name == "SIGTERM"
                           else by_hand)
        if self.requeues >= self.max_requeues:
            return Outcome(False, f"{why}, but already requeued {self.requeues} times (hydra.launcher.max_requeues="
                                  f"{self.max_requeues}): not requeued; {by_hand}")
        return Outcome(True, f"{why}: requeued with resume=true (requeue {self.requeues + 1} of at most "
                             f"{self.max_requeues})")

    def _requeue(self, sweep_overrides, job_dir_key, job_num, job_id, singleton_state) -> None:
        """What submitit's checkpointing does, with `resume=true`: the task's submission is replaced by one
        that resumes, and SLURM requeues the task, which then leaves (no result: the sweep keeps waiting)."""
        import submitit

        self.requeues += 1
        overrides = [o for o in sweep_overrides if not o.startswith("resume=")] + ["resume=true"]
        job = requeue(submitit.helpers.DelayedSubmission(self, overrides, job_dir_key, job_num, job_id,
                                                         singleton_state))
        print(f"normbench: requeued SLURM job {job} with resume=true (requeue {self.requeues} of at most "
              f"{self.max_requeues})", file=sys.stderr, flush=True)
        sys.exit(-1)  # as submitit leaves a requeued task: no result pickle, so the sweep waits for the rerun


def make_executor(params: dict):
    """submitit's executor for a job array with the preset's parameters (`params`: the launcher's keys,
    `submitit_folder` among them), as hydra-submitit's SlurmLauncher builds it; `normbench study` submits
    its rounds through the same."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    own = {"submitit_folder", "max_num_timeout"}  # the executor's own keys; the rest are its parameters
    params = {**params, "srun_args": [*(params.get("srun_args") or []), *HOLD]}  # the last of srun's: the command
    timeouts = {f"slurm_{k}": v for k, v in params.items() if k == "max_num_timeout"}
    executor = submitit.AutoExecutor(cluster="slurm", folder=params["submitit_folder"], **timeouts)
    shared = set(OmegaConf.structured(BaseQueueConf).keys())  # every cluster's keys keep their names
    executor.update_parameters(**{k if k in shared else f"slurm_{k}": v for k, v in params.items() if k not in own})
    return executor


def release() -> None:
    """Let SLURM's signals through to this task's handlers, once installed: one that HOLD held while the task
    started is handled now. One at a time: where both came, the first handler's exception leaves the other
    blocked (`ignore` then discards it) rather than raising again inside the first one's handling."""
    for s in SIGNALS:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {s})


def ignore() -> None:
    """Ignore SLURM's signals from now on: the task's work is over (its result written, or requeued). Ignored,
    rather than left to Python's exit, which restores USR2's default (death)."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)


def slurm_reason(signal_name: str) -> str | None:
    """Why SLURM signalled this task, in words, where a requeue answers it: USR2 (a preemption warning or
    the time limit near), or a SIGTERM that SLURM sent for a time limit or a preemption; None for a SIGTERM
    from scancel, or any other signal."""
    if signal_name == "SIGUSR2":
        return "preempted or near its time limit"
    if signal_name == "SIGTERM":
        job = _scontrol_job()
        return next((w for key, w in SLURM_ENDS.items() if key in job), None)
    return None


def requeue(resumed) -> str:
    """Replace this task's submission by `resumed` (a submitit DelayedSubmission) and requeue the task
    (`scontrol requeue`); returns its SLURM job id. The caller then leaves without a result, so whoever
    waits for the array keeps waiting for the requeued task."""
    import submitit

    env = submitit.JobEnvironment()
    # Written aside and moved over the submission, so the requeued task never reads half a file
    pickle = Path(env.paths.submitted_pickle)
    aside = pickle.with_name(pickle.name + ".resume")
    resumed.dump(aside)
    os.replace(aside, pickle)
    ignore()  # the requeue ends this process's step with SIGTERM; a second warning has nothing left to stop
    subprocess.run(["scontrol", "requeue", env.job_id], check=True, timeout=60)
    return env.job_id


def _scontrol_job() -> str:
    """`scontrol show job` for this task, or "" where it cannot be read."""
    try:
        return subprocess.run(["scontrol", "show", "job", os.environ.get("SLURM_JOB_ID", "")],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _error(job) -> BaseException | None:
    """The task's exception: the one it raised, or submitit's for a task killed before its result."""
    try:
        return job.exception()
    except Exception as e:  # noqa: BLE001 - reading a dead task's result raises what killed it
        return e


TRACE_RULE = "-" * 22  # submitit frames a failed task's traceback between two such lines


def _why(error: BaseException, job) -> str:
    """A dead task's reason in one line: the last line of the traceback it raised (submitit's message
    frames it, then names log paths), else the error's last line, else its SLURM state. submitit keeps a
    task's exception only as that message's text, whose form it does not document: it is read here only,
    and tests/test_private_apis.py reads a real one (a task run by submitit's LocalExecutor)."""
    text = [line for line in str(error).strip().splitlines() if line.strip()]
    rules = [k for k, line in enumerate(text) if line.strip() == TRACE_RULE]
    if len(rules) >= 2 and rules[-1] > rules[0] + 1:
        return text[rules[-1] - 1].strip()[:400]
    return text[-1][:400] if text else str(job.state)


def task_failure(job) -> str | None:
    """A finished task's failure in one line (`_why`), or None where it completed."""
    error = _error(job)
    return None if error is None else _why(error, job)
