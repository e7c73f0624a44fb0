"""The `normbench` command: the only module that imports Hydra.

    normbench train [-m] [key=value ...]      # one run, or a sweep with -m (a Hydra app)
    normbench norms                           # the catalog
    normbench summarize PATH                  # a sweep -> tables, CSV, Markdown, plots
    normbench bench [--quick]                 # how fast the runner is (normbench/bench/)
    normbench study [NAME ...] [scale=...]    # shipped studies through the declared protocol (normbench/study/)
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import shlex
import signal
import sys
import traceback
from pathlib import Path

from normbench.configs import store_configs
from normbench.errors import TasksFailed, UserError
from normbench.train import interrupts
from normbench.userfiles import environmental

USAGE = """\
usage: normbench <command> [args]

Compare normalization layers with real training runs on FashionMNIST and CIFAR-10, and test claims on paired seeds.

commands:
  train [-m] [key=value ...]   train one model (or a sweep with -m); `normbench train --help` lists every key
  norms                        the normalization catalog: what each norm normalizes over, and its paper
  summarize PATH               turn a sweep's results.json files (or its runs file) into tables, CSV, Markdown, plots
  bench [--quick]              time the runner against a hand-written loop, norms, cells and sweeps
  study [NAME ...] [scale=...] run shipped studies through the declared protocol, plan and cost first

examples:
  normbench train norm=ln model=rnn
  normbench train -m norm=bn,gn,ln batch_size=2,8,32,128
  normbench study ghost_batch scale=quick --plan
  tensorboard --logdir outputs
"""


def _debug(overrides: list[str]) -> bool:
    """`debug=true` (read from the command line, so it works even when composition fails) or NORMBENCH_DEBUG."""
    on = ("true", "1", "yes", "on")
    return os.environ.get("NORMBENCH_DEBUG", "").lower() in on or any(
        a.lstrip("+").lower() in {f"debug={v}" for v in on} for a in overrides)


def _fail(e: BaseException, debug: bool, code: int = 2) -> int:
    if debug:
        traceback.print_exception(e)
    print(f"normbench: error: {e}", file=sys.stderr)
    return code


class JobFailed(Exception):
    """One run of a sweep failed; Hydra's sweeper re-raises it once every other run has finished."""

    def __init__(self, message: str, code: int):
        super().__init__(message, code)
        self.message, self.code = message, code


class _LogFormat(logging.Formatter):
    """What the package logs (normbench.train.guards: a resumed run that had already finished, ...), said as
    the CLI says everything: `normbench: ...` on stderr."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"normbench: {level}{record.getMessage()}"


def _show_logs() -> None:
    logger = logging.getLogger("normbench")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_LogFormat())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # Hydra's job logging would print it a second time


def register_resolvers() -> None:
    """`${nb.pid:}` in the run directory's name: runs started in the same second on one machine (a
    script's `cmd & cmd &`) get their own directories; `${nb.sweep_subdir:}` names a sweep's job by
    what the sweep varies."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("nb.pid"):
        # Cached, and Hydra copies the cache into every job of a sweep: the parent's pid, resolved once.
        OmegaConf.register_new_resolver("nb.pid", os.getpid, use_cache=True)
    if not OmegaConf.has_resolver("nb.sweep_subdir"):
        OmegaConf.register_new_resolver("nb.sweep_subdir", _sweep_subdir)


def _run_dir_error(e: OSError, debug: bool) -> int:
    # Hydra creates the run directory and writes .hydra/ into it before the task starts.
    return _fail(UserError(f"cannot write {e.filename or 'the run directory'} ({e.strerror or e})",
                           "point hydra.run.dir (hydra.sweep.dir with -m) at a writable directory"), debug)


def _sweep_domains(hc) -> dict[str, list]:
    """The values each swept key takes in this run's sweep ({"batch_size": [2, 8, 32]}), read from the
    sweep's multirun.yaml, for the run directory's name and TensorBoard's HParams tab. Groups map to their
    name key (norm -> norm.name)."""
    return {k: list(v) for k, v in _read_sweep_domains(str(hc.sweep.dir)).items()}


@functools.lru_cache(maxsize=4)  # a job asks twice: for its directory's name, then for its HParams
def _read_sweep_domains(sweep_dir: str) -> dict[str, tuple]:
    from omegaconf import OmegaConf

    from normbench.cli_errors import parse_overrides

    path = os.path.join(sweep_dir, "multirun.yaml")
    if not os.path.exists(path):
        return {}
    sweep = OmegaConf.load(path).hydra
    # As Hydra's BasicSweeper does: the config's sweeper params, then the command line, which wins.
    lines = [f"{k}={v}" for k, v in (sweep.sweeper.get("params") or {}).items()] + list(sweep.overrides.task)
    domains = {}
    for line in lines:
        try:  # a glob over a group needs Hydra's config loader: skip what cannot be listed here
            (o,) = parse_overrides([line])
            if o.is_sweep_override():
                key = o.key_or_group.lstrip("+~")
                key = f"{key}.name" if key in ("model", "norm", "data") else key
                domains[key] = tuple(sorted(set(o.sweep_iterator()), key=lambda v: (str(type(v)), v)))
        except Exception:  # noqa: BLE001  the HParams domain is a convenience, never a reason to fail a run
            continue
    return domains


def _sweep_subdir() -> str:
    """`${nb.sweep_subdir:}` in config.yaml: this job's run directory, named by what its sweep varies."""
    from hydra.core.hydra_config import HydraConfig

    from normbench.run_names import sweep_subdir

    hc = HydraConfig.get()
    varying = [k for k, v in _sweep_domains(hc).items() if len(v) > 1]
    return sweep_subdir(varying, list(hc.overrides.task), hc.job.num)


class _Task:
    """What the task saw, for the handlers after Hydra returns or raises: did it start (if not, an error
    is Hydra's, from composition), how to resume, and the error of a single run (raised again outside
    Hydra, which would print more)."""

    def __init__(self):
        self.started, self.again, self.error = False, "resume=true", None


def _run_task(dict_cfg, task: _Task, debug: bool) -> None:
    """Hydra's task: one run (or one job of a sweep) from the composed config."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    task.started = True
    _show_logs()  # again here: a launcher (submitit, joblib) runs this in another process
    from normbench.runner import run  # torch loads here, so a mistyped override fails fast

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    task.again = "resume=true " + (f"hydra.sweep.dir={hc.sweep.dir}" if multirun else
                                   f"hydra.run.dir={hc.runtime.output_dir}")
    try:
        res = run(OmegaConf.to_object(dict_cfg), hc.runtime.output_dir,
                  hparam_domains=_sweep_domains(hc) if multirun else None)
    except Exception as e:
        if not multirun:
            task.error = e
            return
        # A sweep goes on with its other runs; each failure is said once, here.
        user = isinstance(e, UserError) or environmental(e) is not None
        if not user or debug:
            traceback.print_exception(e)
        print(f"normbench: error: run {hc.job.num} ({hc.runtime.output_dir}) failed: {e}", file=sys.stderr)
        raise JobFailed(f"runs of the sweep failed (the first: run {hc.job.num}); the others finished: "
                        "each run's results.json says how", 2 if user else 1) from None
    for member in res.get("members", [res]):  # a pack's members, or the one run
        if member["status"] == "diverged":  # a result, not a failure: exit status 0, said once
            where = Path(hc.runtime.output_dir) / member.get("name", "")
            print(f"normbench: diverged at step {member['diverged_step']} (non-finite loss); recorded in "
                  f"{where / 'results.json'}", file=sys.stderr)


def _hydra_train(argv: list[str]) -> int:
    import hydra

    from normbench import cli_errors

    store_configs()
    register_resolvers()
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    debug = _debug(overrides)
    task = _Task()

    @hydra.main(config_path="configs", config_name="config", version_base="1.3")
    def train(dict_cfg) -> None:
        _run_task(dict_cfg, task, debug)

    # Hydra raises instead of printing its multi-line report; the handlers below say it in one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    # Ctrl-C, and SIGTERM (a `kill`, a container stop) alike: the run stops at its next step, checkpointed
    interrupts.install([signal.SIGINT, signal.SIGTERM])
    sys.argv = ["normbench train", *argv]
    try:
        cli_errors.check_added_keys(overrides)
        cli_errors.check_pack_overrides(overrides)
        cli_errors.check_model_override(overrides)
        train()
        if task.error is not None:
            raise task.error
    except BaseException as e:  # noqa: BLE001  every way out becomes an exit status and at most one line
        return _exit_status(e, task, overrides, debug)
    return 0


def _exit_status(e: BaseException, task: _Task, overrides: list[str], debug: bool) -> int:
    """The exit status for `e`, its one line said on stderr; what is not a known failure is raised."""
    from normbench import cli_errors

    if isinstance(e, UserError):
        return _fail(e, debug)
    if (machine := environmental(e)) is not None:  # a full disk, a read-only folder: before or while training
        return _fail(machine, debug) if task.started else _run_dir_error(e, debug)
    if isinstance(e, JobFailed):
        print(f"normbench: error: {e.message}", file=sys.stderr)
        return e.code
    if isinstance(e, KeyboardInterrupt):
        stop = e if isinstance(e, interrupts.Interrupted) else interrupts.Interrupted("SIGINT")
        print(f"normbench: interrupted ({stop.signal}) {stop.where}: rerun the same command with {task.again}",
              file=sys.stderr)
        return interrupts.exit_status(stop)
    if isinstance(e, TasksFailed):  # a cluster sweep, after every task ended: one line per task that died
        kept = [o for o in overrides if not o.startswith(("hydra.sweep.dir=", "resume=", "-m", "--multirun"))]
        again = shlex.join(["normbench", "train", "-m", *kept, "resume=true", f"hydra.sweep.dir={e.sweep_dir}"])
        for index, job_id, state, task_overrides, why in e.tasks:
            print(f"normbench: error: task {index} (SLURM job {job_id}, state: {state}; {' '.join(task_overrides)}) "
                  f"did not complete: {why}; the sweep's other tasks have ended; continue the unfinished runs "
                  f"from their checkpoints with: {again}", file=sys.stderr)
        return 1
    if _killed_task(e):
        print(f"normbench: error: {' '.join(str(e).splitlines()[:2])}; the sweep's other runs go on (squeue); "
              "rerun the same command with resume=true and the same hydra.sweep.dir to continue the "
              "unfinished runs from checkpoint.pt", file=sys.stderr)
        return 1
    if not isinstance(e, Exception):  # SystemExit and the like: not ours to translate
        raise e
    explained = None if task.started else cli_errors.explain(e, overrides)
    if explained is None:
        if isinstance(e, OSError) and not task.started:
            return _run_dir_error(e, debug)
        raise e
    if debug:
        traceback.print_exception(e)
    return _fail(explained, debug=False)


def _killed_task(e: BaseException) -> bool:
    """Is `e` submitit's UncompletedJobError itself, a SLURM task killed before its result (hydra-submitit's
    launcher raises it)? Not its subclass FailedJobError, a task that raised: its traceback is shown. False
    where submitit is not installed: nothing could have raised it. The class lives in submitit.core.utils,
    which submitit's top level does not re-export: read here only, and tests/test_private_apis.py checks
    that a task killed before its result is one."""
    try:
        from submitit.core.utils import UncompletedJobError
    except ImportError:
        return False
    return type(e) is UncompletedJobError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _show_logs()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "train":
        return _hydra_train(rest)
    if command in ("summarize", "norms", "bench", "study"):
        if command == "summarize":
            from normbench.summary.summarize import main as command_main
        elif command == "norms":
            from normbench.catalog import main as command_main
        elif command == "study":
            from normbench.study.command import main as command_main
        else:
            from normbench.bench import main as command_main

        try:
            return command_main(rest)
        except UserError as e:
            return _fail(e, False)
        except OSError as e:
            if (machine := environmental(e)) is None:
                raise
            return _fail(machine, False)
    print(f"normbench: error: unknown command {command!r}; choose train, norms, summarize, bench or study "
          "(see normbench --help)", file=sys.stderr)
    return 2


def entry() -> None:
    """The `normbench` command (and `python -m normbench`): `main`, then a normal exit (exit handlers, stream
    flushes, joblib's worker shutdown), with the objects alive at that point moved out of the garbage
    collector's reach (`gc.freeze`, public since Python 3.7): with torch loaded, most of the interpreter's
    teardown (2 s of a short run here) is collections over torch's ~300k objects (docs/performance.md).
    Refcounted objects are still freed; only reference cycles among the frozen ones are left to the
    process's end, their __del__ not run."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
