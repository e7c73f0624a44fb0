"""Where a study's jobs train: this machine (`Local`) or a SLURM cluster (`study.slurm.Slurm`), behind one
interface, so that the rounds (rounds.py) read the same for both:

    for ended in executor.train(jobs, seeds, index):   # as each job of the batch ends
        ended.job, ended.code, ended.seconds, ended.log

Either way a job is its own `normbench train` (jobs.command), its output appended to the log beside its
folder (<out>/<study>/r<round>/<job>.log); `code` is that command's exit status, `seconds` the time it ran.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from normbench.errors import UserError
from normbench.study import jobs as joblist


@dataclass(frozen=True)
class Ended:
    """A job of a batch that ended: its command's exit status, the seconds it ran, its log, and where it
    failed on a cluster, which task and why (`note`)."""
    job: joblist.Job
    code: int
    seconds: float
    log: Path
    note: str = ""


def log_path(job: joblist.Job, index: int, out: Path) -> Path:
    """The log of `job` at round `index`: beside its folder, one per job, appended to by every attempt."""
    return joblist.directory(job, index, out).parent / f"{job.name}.log"


LOCK = ".lock"  # in a study's folder while a `normbench study` (or a job it started) writes it: who holds it
_held: list[int] = []  # the lock's descriptor, passed to every job: the lock lasts while any of them runs


def hold(out: Path, what: str) -> None:
    """An exclusive lock on the study's folder (flock on out/.lock, which names the holder) for as long as
    this process or a job it starts runs: a second study into the same folder would train the same jobs
    twice. A UserError naming the holder; on a file system without locks (NFS without lockd, Lustre without
    flock) a warning, and no lock."""
    import errno
    import fcntl
    import os
    import time

    out.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # never a symlink's target
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise UserError(f"{out / LOCK} is a symbolic link", "delete it: a study writes its lock there") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 400, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise UserError(f"{out} is in use by {holder}", "wait for it to end, or give this study another out=") from None
    except OSError as e:
        os.close(fd)
        if e.errno not in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
        print(f"normbench: warning: {out}'s file system has no locks ({e.strerror}): run one study into it at a "
              "time", file=sys.stderr)
        return
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"process {os.getpid()} ({what}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n".encode(), 0)
    _held[:] = [fd]


def release() -> None:
    """This process lets go of the study's lock (the jobs it started keep theirs until they end)."""
    import os

    while _held:
        os.close(_held.pop())


def start(cmd: list[str], log: Path, **popen) -> subprocess.Popen:
    """`cmd` started with its output appended to `log`, after a line with the command itself; it holds the
    study's lock too (`hold`)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:  # the child holds its own descriptor: this one closes at once
        f.write("$ " + " ".join(cmd[2:]) + "\n")
        f.flush()
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, pass_fds=tuple(_held), **popen)


class Local:
    """Trains a batch's jobs on this machine: `workers` `normbench train` processes side by side (one torch
    thread each, as the study's jobs set), the longest first as they are given."""

    def __init__(self, workers: int, out: Path, say=print):
        self.parallel, self.out, self.say = max(1, workers), Path(out), say
        self._stopping, self._lock = False, threading.Lock()  # set once the study stops: no job starts after

    def describe(self) -> str:
        return f"{self.parallel} at once"

    def train(self, jobs: list[joblist.Job], seeds: list[int], index: int, label: str = "") -> Iterator[Ended]:
        """Each of `jobs` at `seeds`, as it ends (`label`: the batch, in words; a cluster's record keeps it).
        Ctrl-C (or an error) starts no queued job; the jobs in flight stop at their next step (the
        terminal's SIGINT reaches them) and are waited for."""
        self._stopping = False
        pool = ThreadPoolExecutor(self.parallel)
        try:
            futures = {pool.submit(self._one, j, seeds, index): j for j in jobs}
            for future in as_completed(futures):
                yield Ended(futures[future], *future.result())
        except BaseException as e:  # Ctrl-C, or an error: no queued job starts (the pool would train them all)
            with self._lock:
                self._stopping = True
            pool.shutdown(wait=False, cancel_futures=True)
            if isinstance(e, KeyboardInterrupt):
                self.say("stopping: no other job starts; the jobs in flight stop at their next step (a SIGINT "
                         "sent to this process alone does not reach them: they then train to their end)")
            raise
        finally:
            pool.shutdown(wait=True)  # the jobs in flight end: on Ctrl-C the terminal's SIGINT reached them too

    def _one(self, job: joblist.Job, seeds, index: int) -> tuple[int, float, Path]:
        log = log_path(job, index, self.out)
        started = time.perf_counter()
        with self._lock:  # a job taken from the queue as the study stops does not start
            if self._stopping:
                return 130, 0.0, log
            proc = start(joblist.command(job, seeds, self.out, index), log)
        return proc.wait(), time.perf_counter() - started, log
