"""normbench's SLURM launcher: hydra-submitit's, waiting for every task before it answers.

hydra-submitit collects a job array's results in array order and raises at the first task that died, so
`normbench train -m` returned while later tasks still ran. This launcher lets every task of the array end
first, then raises one `normbench.errors.TasksFailed` naming each task that did not complete (the CLI
says one line per task, with the command that resumes it); the completed tasks' results are already in
their run directories. Selected by normbench/configs/hydra/launcher/slurm.yaml.
"""

from __future__ import annotations

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher


class NormbenchSlurmLauncher(SlurmLauncher):
    def launch(self, job_overrides, initial_job_idx):
        import submitit

        from normbench.errors import TasksFailed

        submit = submitit.AutoExecutor.map_array

        def map_array(executor, fn, *iterables):
            jobs = submit(executor, fn, *iterables)
            for job in jobs:  # every task of the array ends (its result written, or SLURM says it died)
                job.wait()
            errors = [_error(job) for job in jobs]
            failed = [(initial_job_idx + k, job.job_id, job.state, list(overrides), _why(error, job))
                      for k, (job, overrides, error) in enumerate(zip(jobs, job_overrides, errors))
                      if error is not None]
            if failed:
                raise TasksFailed(failed, str(self.config.hydra.sweep.dir))
            return jobs

        submitit.AutoExecutor.map_array = map_array  # the parent's launch builds the executor it calls
        try:
            return super().launch(job_overrides, initial_job_idx)
        finally:
            submitit.AutoExecutor.map_array = submit


def _error(job) -> BaseException | None:
    """The task's exception: the one it raised, or submitit's for a task killed before its result."""
    try:
        return job.exception()
    except Exception as e:  # noqa: BLE001 - reading a dead task's result raises what killed it
        return e


def _why(error: BaseException, job) -> str:
    """A dead task's reason in one line: its exception's last line, else its SLURM state."""
    text = str(error).strip().splitlines()
    return text[-1][:300] if text else str(job.state)
