"""The one exception type users see: a problem and the fix, never a stack trace."""


class ErnieDeployError(Exception):
    """An error with a message that names the problem and, where known, the fix."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(problem if not fix else f"{problem}\n  fix: {fix}")


class BadRequest(ErnieDeployError):
    """A fault of one request (its texts or tensors), not of the model or the server: served as
    INVALID_ARG, never worth retrying unchanged."""
