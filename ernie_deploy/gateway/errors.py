"""What the gateway answers when a request cannot be answered: one GatewayError, written in the error shape of the
contract whose route was called.

- SimpleServing's route answers as that server does (FastAPI): a problem with the body's JSON or its fields is a 422
  `{"detail": [{"type", "loc", "msg"}]}`, any other `{"detail": "<message>"}`.
- Hugging Face's routes answer as text-embeddings-inference does: `{"error": "<message>", "error_type": "<type>"}`,
  error_type one of TEI's (validation, empty, tokenizer, backend, overloaded, unhealthy) or not_found.
- The OpenAI routes (`/v1/...`) answer as OpenAI's API does, which the `openai` package reads into its exception
  classes by status: `{"error": {"message", "type", "param", "code"}}`, type `invalid_request_error` for the
  request's fault (4xx) and `server_error` for the server's or the model's; param the body field at fault (null
  where none is); code `model_not_found` for an unknown model, else the gateway's error type (validation, empty,
  overloaded, unhealthy, backend).

Every message names the problem and the fix (core.errors' rule), never a stack trace."""

from __future__ import annotations

from starlette.responses import JSONResponse

from ernie_deploy.core.errors import ErnieDeployError


class GatewayError(ErnieDeployError):
    """A request the gateway refuses or cannot answer: its HTTP status, TEI's error type, the message, and for a
    problem in the body's JSON where it is (`loc`, FastAPI's path into the body).

    The status says whose fault it is: 4xx the request's (not worth sending again unchanged), 5xx and 424 the
    server's or the model's. `message` is what the client reads: the problem and, given `fix`, the fix, on one line.
    A fix already written into `problem` after "; fix: " is read back as the fix."""

    def __init__(
        self,
        status: int,
        error_type: str,
        problem: str,
        *,
        fix: str | None = None,
        loc: list | None = None,
        kind: str = "value_error",
        headers: dict[str, str] | None = None,
    ):
        if fix is None and _FIX in problem:
            problem, fix = problem.split(_FIX, 1)
        super().__init__(problem, fix)
        self.status = status
        self.error_type = error_type
        self.message = message(self)
        self.loc = loc
        self.kind = kind
        self.headers = headers or {}

    @classmethod
    def invalid(cls, problem: str, fix: str, loc: list, kind: str = "value_error") -> GatewayError:
        """A body whose JSON or fields are not what the route takes (422)."""
        return cls(422, "validation", problem, fix=fix, loc=loc, kind=kind)

    @classmethod
    def from_error(cls, error: ErnieDeployError, status: int = 422, error_type: str = "validation") -> GatewayError:
        return cls(status, error_type, error.problem, fix=error.fix)


# Between the problem and the fix in a message on one line.
_FIX = "; fix: "


def message(error: ErnieDeployError) -> str:
    """An ErnieDeployError on one line: the problem, then the fix."""
    return f"{error.problem}{_FIX}{error.fix}" if error.fix else error.problem


def simple_serving_response(error: GatewayError) -> JSONResponse:
    if error.loc is not None:
        detail = [{"type": error.kind, "loc": error.loc, "msg": error.message}]
    else:
        detail = error.message
    return JSONResponse({"detail": detail}, error.status, headers=error.headers)


def hugging_face_response(error: GatewayError) -> JSONResponse:
    return JSONResponse({"error": error.message, "error_type": error.error_type}, error.status, headers=error.headers)


# OpenAI's error types: the request's fault, or the server's (the openai package raises by status, not by these).
OPENAI_REQUEST = "invalid_request_error"
OPENAI_SERVER = "server_error"


def openai_response(error: GatewayError) -> JSONResponse:
    # `loc` is FastAPI's path into the body (["body", "input", 3]); OpenAI names the top-level field alone.
    param = error.loc[1] if error.loc and error.loc[0] == "body" and len(error.loc) > 1 else None
    body = {
        "message": error.message,
        "type": OPENAI_REQUEST if error.status < 500 and error.status != 424 else OPENAI_SERVER,
        "param": param,
        "code": "model_not_found" if error.error_type == "not_found" else error.error_type,
    }
    return JSONResponse({"error": body}, error.status, headers=error.headers)
