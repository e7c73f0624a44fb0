"""A study's rounds on a SLURM cluster (`normbench study NAME launcher=slurm`): each batch of jobs (a
round's, a widening's) goes out as one job array through submitit, the study waits for it, then looks.

    params = settings(["slurm.partition=debug"])       # the slurm preset's parameters, overridden
    executor = Slurm(params, out, state)               # launch.py's interface: train(jobs, seeds, index)

Each task runs its job's `normbench train` (jobs.command, decided on the node: `resume=true` where the
job's folder exists) as a child process, its output appended to the job's log as on one machine. The
faults a cluster brings:

- **The study stops** (killed, Ctrl-C, the login node restarts) while an array runs: the array goes on.
  study.json keeps each array's task ids as it is submitted (`State.arrays`), so the same command attaches
  to the tasks it has not collected (running, or ended meanwhile: submitit's result file, else SLURM's
  accounting, says how) and submits only the jobs no array holds. A job is never trained twice.
- **Preemption or the time limit**: SLURM's USR2 (a preemption warning, or `signal_delay_s` before the
  limit) and the SIGTERM it sends for a time limit or a preemption stop the run at its next step with a
  checkpoint there (normbench.train.interrupts), and the task requeues itself, as a `train -m` task of
  the slurm preset does (hydra_plugins/normbench_slurm: `slurm_reason`, `requeue`); requeued, it runs
  the same command, now with `resume=true`, and ends with the numbers of an unbroken run.
- **A task fails** (its training exits non-zero, or it is killed, cancelled, out of memory): the other
  tasks end, then the study stops before its look, naming the task, its log and the command that
  retries it (the same command: it submits the failed job again).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import yaml

from normbench.errors import UserError
from normbench.study import jobs as joblist
from normbench.study.launch import Ended, log_path, start

PRESET = Path(__file__).resolve().parents[1] / "configs" / "hydra" / "launcher" / "slurm.yaml"
SHOWN = ("partition", "account", "qos", "gpus_per_node", "timeout_min", "mem_gb", "cpus_per_task",
         "array_parallelism")  # the keys a cluster usually needs set (docs/cluster.md)
OWN = ("_target_", "submitit_folder", "setup")  # the preset's keys a study sets itself
POLL_S = 1.0  # how often the study looks for a task's result file (submitit polls SLURM itself, less often)


def settings(overrides: list[str]) -> dict:
    """The SLURM parameters of a study's arrays: the `slurm` preset's (normbench/configs/hydra/launcher/
    slurm.yaml, what `normbench train -m hydra/launcher=slurm` submits with, on its schema's defaults),
    then each `slurm.KEY=VALUE` given; a one-line UserError for a key or value the schema refuses."""
    from hydra_plugins.normbench_slurm import MISSING_EXTRA, NormbenchSlurmConf

    if MISSING_EXTRA is not None:
        raise MISSING_EXTRA
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    raw = yaml.safe_load(PRESET.read_text())
    conf = OmegaConf.merge(OmegaConf.structured(NormbenchSlurmConf),
                           {k: v for k, v in raw.items() if k not in OWN and k != "defaults"})
    for override in overrides:
        key, _, value = override.partition("=")
        name = key.removeprefix("slurm.")
        if name.split(".")[0] not in conf or name.split(".")[0] in OWN:
            raise UserError(f"{key}: no such SLURM setting", f"use slurm.KEY=VALUE with a key of "
                            f"{PRESET.name}, e.g. {', '.join(f'slurm.{k}' for k in SHOWN)} (docs/cluster.md)")
        try:
            OmegaConf.update(conf, name, yaml.safe_load(value) if value.strip() else None, merge=False)
        except (OmegaConfBaseException, yaml.YAMLError) as e:
            raise UserError(f"{override}: {str(e).splitlines()[0]}", "give a value of the key's type") from None
    params = OmegaConf.to_container(conf)
    params.pop("_target_")
    # the preset's lines before the task (OMP_NUM_THREADS), its ${hydra.launcher.KEY}s from these parameters
    params["setup"] = [re.sub(r"\$\{hydra\.launcher\.(\w+)\}", lambda m: str(params[m.group(1)]), line)
                       for line in raw.get("setup") or []]
    return params


def describe(params: dict) -> str:
    """What each task asks SLURM for, and where it trains, in words (the plan's)."""
    where = (f"{params['gpus_per_node']} GPU each (device=auto trains on it: CUDA)" if params.get("gpus_per_node")
             else "the CPU (no GPU asked: slurm.gpus_per_node=1 for one)")
    asks = [f"{params['cpus_per_task']} CPU", f"{params['mem_gb']} GB", f"a {params['timeout_min']} min limit"]
    queue = ", ".join(f"{k} {params[k]}" for k in ("partition", "account", "qos") if params.get(k))
    return (f"{', '.join(asks)} per task, at most {params['array_parallelism']} at once, trained on {where}"
            + f"; {queue or 'the default partition'}")


@dataclass(frozen=True)
class Task:
    """One job of a batch as an array task: what its node needs to run the job's `normbench train`, how many
    times it was requeued and the seconds its earlier allocations trained."""
    job: joblist.Job
    seeds: tuple[int, ...]
    out: str  # absolute: the node's working directory need not be the study's
    index: int
    max_requeues: int
    requeues: int = 0
    seconds: float = 0.0


def run_task(task: Task) -> tuple[int, float]:
    """On the node: the job's `normbench train`, to its end: (0, seconds it trained, every allocation
    together). Preempted or at its time limit, the run stops at its next step with a checkpoint and the
    task requeues itself to resume it; any other end raises, so SLURM says FAILED and the study names it."""
    from hydra_plugins.normbench_slurm import ignore, release, requeue, slurm_reason
    from submitit.helpers import DelayedSubmission

    out, log = Path(task.out), log_path(task.job, task.index, Path(task.out))
    seen, child = _route_signals()
    release()  # a signal held while this task started (normbench_slurm.HOLD) is noted now
    started = time.perf_counter()
    # The child ignores USR2 (the default would kill it): this process turns it into the SIGTERM the run
    # stops at. A SIGTERM from SLURM reaches the child directly, as it reaches every process of the step.
    proc = start(joblist.command(task.job, task.seeds, out, task.index), log,
                 preexec_fn=lambda: signal.signal(signal.SIGUSR2, signal.SIG_IGN))
    child.append(proc)
    if seen:  # it came before the run started (a SIGTERM too: the run was not there to receive it)
        proc.send_signal(signal.SIGTERM)
    code = proc.wait()
    seconds = task.seconds + time.perf_counter() - started
    if code == 0:
        ignore()  # the run is over: a warning now has nothing to stop (and USR2's default would fail the task)
        return 0, seconds
    why = next((w for w in map(slurm_reason, seen) if w), None) if seen else None
    if why and task.requeues < task.max_requeues:
        with open(log, "a") as f:
            f.write(f"normbench study: {why}: SLURM requeues this task; the run resumes from its checkpoint "
                    f"(requeue {task.requeues + 1} of at most {task.max_requeues})\n")
        job_id = requeue(DelayedSubmission(run_task, replace(task, requeues=task.requeues + 1, seconds=seconds)))
        print(f"normbench: requeued SLURM job {job_id} to resume (requeue {task.requeues + 1} of at most "
              f"{task.max_requeues})", file=sys.stderr, flush=True)
        sys.exit(-1)  # no result file: whoever waits for the array waits for the requeued task
    if why:
        why = f"{why}, but already requeued {task.requeues} times (slurm.max_requeues={task.max_requeues})"
    elif seen:
        why = "cancelled (scancel)"
    raise RuntimeError(f"normbench train exited with status {code} after {seconds:.1f} s"
                       + (f" ({why}): not requeued" if why else ""))


def _route_signals() -> tuple[list[str], list]:
    """Replace submitit's handlers (USR2: requeue at once and start over; SIGTERM: ignored) by ones that
    note the signal and pass USR2 on to the run as SIGTERM. Returns (the signals seen, [the run's
    process], filled in once it starts)."""
    from hydra_plugins.normbench_slurm import SIGNALS

    seen: list[str] = []
    child: list[subprocess.Popen] = []

    def note(signum, frame) -> None:
        seen.append(signal.Signals(signum).name)
        if signum == signal.SIGUSR2 and child and child[0].poll() is None:
            child[0].send_signal(signal.SIGTERM)

    for s in SIGNALS:
        signal.signal(s, note)
    return seen, child


def _ended(task) -> bool:
    """Has the task ended? Its result file says so; without one, submitit's word (SLURM's accounting, which
    lags the controller, and whose first end submitit keeps) only once SLURM's controller no longer holds
    the task: a task that requeued itself is pending again, its result still to come."""
    if not task.done():
        return False
    return task.paths.result_pickle.exists() or not _queued(task.job_id)


def _queued(job_id: str) -> bool:
    """Does SLURM's controller still hold the job (pending, requeued, running)? False where squeue cannot
    say: then the accounting decides, as submitit does."""
    try:
        return bool(subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                                   timeout=60).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return False


EXITED = re.compile(r"exited with status (-?\d+) after ([\d.]+) s")


class Slurm:
    """Trains a batch's jobs on SLURM, one job array a batch (launch.py's interface), its task ids kept in
    `state.arrays` so that a study run again attaches to the tasks it has not collected."""

    def __init__(self, params: dict, out: Path, state, say=print):
        self.params, self.out, self.state, self.say = params, Path(out), state, say
        self.parallel = int(params["array_parallelism"])
        self.folder = self.out.resolve() / ".submitit" / "%j"  # each task's sbatch script, result and logs

    def describe(self) -> str:
        return f"as one SLURM array of at most {self.parallel} at once"

    def train(self, jobs: list[joblist.Job], seeds: list[int], index: int, label: str = "") -> Iterator[Ended]:
        """Each of `jobs` at `seeds`, as its task ends: those an array of study.json still holds are
        attached to, the others submitted as one new array (`label`: the batch, in study.json's words)."""
        keys = {self._key(j, index): j for j in jobs}
        tasks = self._attach(keys)
        fresh = [j for key, j in keys.items() if key not in tasks]
        if fresh:
            tasks.update(self._submit(fresh, seeds, index, label or f"round {index + 1}"))
        try:
            yield from self._wait(tasks, keys, index)
        except KeyboardInterrupt:
            ids = sorted({a["id"] for a in self.state.arrays if len(a["collected"]) < len(a["tasks"])})
            self.say(f"stopping: SLURM array{'s' * (len(ids) > 1)} {', '.join(ids)} go{'es' * (len(ids) == 1)} on; "
                     f"the same command attaches to {'them' if len(ids) > 1 else 'it'} again (scancel {ids[0]} "
                     "to stop it)" if ids else "stopping")
            raise

    def _key(self, job: joblist.Job, index: int) -> str:
        return str(joblist.directory(job, index, self.out).relative_to(self.out))

    def _attach(self, keys: dict) -> dict:
        """{job key: (array record, task index, submitit job)} for each of `keys` an array of study.json
        holds and whose end it has not recorded."""
        import submitit

        found = {}
        for array in self.state.arrays:
            mine = [k for k, key in enumerate(array["tasks"]) if key in keys and k not in array["collected"]]
            for k in mine:
                found[array["tasks"][k]] = (array, k, submitit.SlurmJob(self.folder, array["jobs"][k]))
            if mine:
                self.say(f"  attached to SLURM array {array['id']} ({array['label']}): {len(mine)} of its "
                         f"{len(array['tasks'])} tasks not collected yet")
        return found

    def _submit(self, jobs: list[joblist.Job], seeds: list[int], index: int, label: str) -> dict:
        """`jobs` as one job array (a single job: one plain SLURM job), recorded in study.json at once."""
        from hydra_plugins.normbench_slurm import make_executor

        params = {k: v for k, v in self.params.items() if k != "max_requeues"}
        executor = make_executor({**params, "submitit_folder": str(self.folder)})
        out = str(self.out.resolve())
        tasks = [Task(j, tuple(seeds), out, index, int(self.params["max_requeues"])) for j in jobs]
        try:
            submitted = executor.map_array(run_task, tasks)
        except Exception as e:  # noqa: BLE001  sbatch's refusal (a partition, account or limit), in one line
            lines = [line for line in str(e).splitlines() if line.strip()]
            raise UserError(f"SLURM refused the array: {lines[-1] if lines else type(e).__name__}", "check "
                            "slurm.partition, slurm.account, slurm.qos and the limits (sinfo, sacctmgr)") from None
        ids = [job.job_id for job in submitted]
        array = {"id": ids[0].split("_")[0], "round": index + 1, "label": label,
                 "tasks": [self._key(j, index) for j in jobs], "jobs": ids, "collected": []}
        self.state.arrays.append(array)
        self.state.save(self.out)
        self.say(f"  submitted SLURM array {array['id']}: {len(jobs)} task{'s' * (len(jobs) > 1)}, "
                 f"logs in {self.folder.parent}")
        return {key: (array, k, job) for k, (key, job) in enumerate(zip(array["tasks"], submitted))}

    def _wait(self, tasks: dict, keys: dict, index: int) -> Iterator[Ended]:
        pending = dict(tasks)
        while pending:
            for key, (array, k, job) in list(pending.items()):
                if _ended(job):
                    del pending[key]
                    yield self._collect(keys[key], array, k, job, index)
            if pending:
                time.sleep(POLL_S)

    def _collect(self, job: joblist.Job, array: dict, k: int, task, index: int) -> Ended:
        """The ended task's exit and seconds (its result, or what its failure says), recorded as collected."""
        from hydra_plugins.normbench_slurm import task_failure

        failure = task_failure(task)
        if failure is None:
            code, seconds = task.result()
            note = ""
        else:
            exited = EXITED.search(failure)
            code, seconds = (int(exited.group(1)), float(exited.group(2))) if exited else (1, 0.0)
            note = f"SLURM task {task.job_id}, {task.state}: {failure}; SLURM's log {task.paths.stderr}"
        array["collected"].append(k)
        self.state.save(self.out)
        return Ended(job, code, seconds, log_path(job, index, self.out), note)
