"""Errors a user can cause. The CLI prints them as one line and exits with status 2.

    raise UserError("batch_size must be >= 1 (got 0)", fix="set batch_size=2 or more")
"""


class UserError(ValueError):
    """A mistake in what the user asked for (a bad override, missing data, an impossible combination)."""

    def __init__(self, what: str, fix: str | None = None):
        self.what, self.fix = what, fix
        super().__init__(f"{what}; {fix}" if fix else what)


class TasksFailed(RuntimeError):
    """Tasks of a cluster sweep that did not complete, after every task of the sweep has ended:
    (index in the sweep, SLURM job id, its state, the task's overrides, why) each."""

    def __init__(self, tasks: list[tuple[int, str, str, list[str], str]], sweep_dir: str):
        self.tasks, self.sweep_dir = tasks, sweep_dir
        super().__init__(f"{len(tasks)} task(s) of the sweep did not complete")
