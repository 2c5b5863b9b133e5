"""The one exception type users see: a problem and the fix, never a stack trace."""


class ErnieDeployError(Exception):
    """An error with a message that names the problem and, where known, the fix."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(problem if not fix else f"{problem}\n  fix: {fix}")
