"""Errors a user can cause. The CLI prints them as one line and exits with status 2.

    raise UserError("batch_size must be >= 1 (got 0)", fix="set batch_size=2 or more")
"""


class UserError(ValueError):
    """A mistake in what the user asked for (a bad override, missing data, an impossible combination)."""

    def __init__(self, what: str, fix: str | None = None):
        self.what, self.fix = what, fix
        super().__init__(f"{what}; {fix}" if fix else what)
