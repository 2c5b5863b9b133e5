"""The exceptions users see: each names the problem and, where known, the fix, never a stack trace.

Every one is an ErnieDeployError, so `except ErnieDeployError` catches them all (what the CLI does). A library caller
that handles some failures its own way catches the subclass instead: a parity failure is not retried the way a
server that is still starting is. Each keeps the one constructor, (problem, fix), and `str()` of each names both.
"""

__all__ = [
    "AccuracyGateError",
    "BadCheckpointError",
    "BadDataError",
    "BadOptionsError",
    "BadRepositoryError",
    "BadRequest",
    "DownloadError",
    "ErnieDeployError",
    "FailedRequestsError",
    "InputLimitError",
    "InstallError",
    "ParityError",
    "ServerNotReadyError",
]


class ErnieDeployError(Exception):
    """An error with a message that names the problem and, where known, the fix."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(problem if not fix else f"{problem}\n  fix: {fix}")


class BadRequest(ErnieDeployError):
    """A fault of one request (its texts or tensors), not of the model or the server: served as
    INVALID_ARG, never worth retrying unchanged."""


class InputLimitError(BadRequest):
    """A text or a request past what the served model accepts: characters per text or per request
    (serving/limits.py), checked before any tokenizing.

    A caller typically splits the request into smaller ones or shortens the text; sending it again unchanged is
    refused again."""


class BadOptionsError(ErnieDeployError):
    """Options that cannot work as given: an unknown task, precision or layout, a value out of range, flags that
    exclude each other, a deployment file's key of the wrong type. Raised before any work is done.

    A caller typically corrects its arguments; nothing was written."""


class BadDataError(ErnieDeployError):
    """A data file (a split, labels, calibration or parity texts) that is missing or not of its format.

    A caller typically fetches the data again (`ernie-deploy fetch-data`) or fixes the file the message names."""


class DownloadError(ErnieDeployError):
    """A download that failed, or a file whose sha256 is not the pinned one, or an archive that is unreadable or
    not safe to extract. Nothing unverified is kept.

    A caller typically retries a failed transfer later; a mismatch means the source or the pin is wrong."""


class BadCheckpointError(ErnieDeployError):
    """A checkpoint, or a model a stage made from one (static, ONNX), that the next stage cannot use: missing,
    of no layout it recognizes, unreadable, or not of the task it is asked for.

    A caller typically runs the earlier stage again (`fetch`, `export`, `convert`) or passes another checkpoint."""


class ParityError(ErnieDeployError):
    """A converted model that does not compute what its reference does: the ONNX model's outputs differ from
    Paddle's past the tolerance, or a reduced precision (INT8, FP16) drifts from FP32 past its gate. The new model
    is not published; the previous one stays served.

    A caller typically serves the precision that passed (FP32, without `--optimize`), or loosens the gate
    knowingly; retrying unchanged gives the same answer."""


class AccuracyGateError(ErnieDeployError):
    """A model's score on a split below the floor it must reach: a converted, quantized or served model scoring
    worse than the gate allows (export/gates.py: require_at_least).

    A caller typically keeps the previous model and looks at the data or the training; the model itself runs."""


class BadRepositoryError(ErnieDeployError):
    """A model repository that cannot be served as it is: what `ernie-deploy check` finds, a folder that is not a
    repository, a served model that is missing, or a model record (model.json, `model_spec`) that is missing, of an
    older format or unreadable.

    A caller typically rebuilds the repository or the model (`ernie-deploy build`), or points at the right folder."""


class ServerNotReadyError(ErnieDeployError):
    """A server that is not there to answer: tritonserver did not start or become ready in time, exited, or a URL
    where no server (or no ready model) answers.

    A caller typically waits and retries, or starts the server; the message carries the server log's errors where
    this process started it."""


class FailedRequestsError(ErnieDeployError):
    """Requests a running server answered with an error, wrongly or not at all: a model that fails a client's
    inference, a benchmark or soak whose requests failed, got lost or were answered by the wrong version, a probe or
    a rollout's canary whose texts came back without their answer. The server is up; a model of it is not answering.

    A caller typically reads the server's log for the model's errors, then restarts the server or rebuilds the model;
    sending the same requests again meets the same failure."""


class InstallError(ErnieDeployError):
    """Something this install lacks: a program or package a step needs (tritonserver, its Python backend stub or
    response cache library, perf_analyzer, PyYAML, the Grafana SDK, a paddlenlp model class), one of another version
    than the one expected, or a part of ernie-deploy's own (a kind package without its record or a layer's module).

    A caller typically installs what the message names and runs the step again; its inputs are not at fault."""
