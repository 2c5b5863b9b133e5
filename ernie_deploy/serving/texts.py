"""The texts of a request: decoded from Triton's BYTES tensors and checked, each bad one named by its input and
index, so that a caller can resend the good ones. The gRPC client applies the same rule (`text_problem`) before it
sends anything."""

from __future__ import annotations

import unicodedata

import numpy as np

from ernie_deploy.core.errors import BadRequest, InputLimitError
from ernie_deploy.serving.limits import TextLimits


def text_problem(item) -> str | None:
    """Why one element of a BYTES text tensor cannot be served, or None when it can."""
    try:
        text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
    except UnicodeDecodeError as exc:
        return f"is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    if not text.strip():
        return "is empty"
    if not any(_kept(ch) for ch in text):
        # The tokenizer drops control and format characters (NUL included): nothing would be left to classify.
        return "has only control or format characters, which the tokenizer drops"
    return None


def _kept(ch: str) -> bool:
    return not (ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") or ch == "\ufffd")


_FIXES = {
    "is not": "encode texts as UTF-8",
    "is empty": "send at least one visible character per text",
    "has only": "send at least one visible character per text",
}


def decode_texts(array: np.ndarray, name: str = "text", limits: TextLimits | None = None) -> list[str]:
    """BYTES tensor [B, 1] -> list of str, rejecting what the model cannot use with a message that names
    every bad text of the request by its input and index (so a caller can resend the good ones). With `limits`, a
    text over the model's length limit is one of those, found before it is decoded where its bytes tell."""
    if array.dtype != np.object_:
        raise BadRequest(
            f"input {name!r} has dtype {array.dtype}; expected BYTES (TYPE_STRING)",
            "send UTF-8 strings as a BYTES tensor of shape [batch, 1]",
        )
    texts, problems, fixes = [], [], {}
    for i, item in enumerate(array.reshape(-1)):
        text, problem, fix = _decode_one(item, limits)
        if problem:
            problems.append(f"{name} {i} {problem}")
            fixes[fix] = None
        texts.append(text)
    if problems:
        # Only texts over the length limit: the caller can split them; any other problem makes it a plain BadRequest.
        over = limits is not None and set(fixes) == {limits.text_fix}
        raise (InputLimitError if over else BadRequest)("; ".join(problems), "; ".join(fixes))
    return texts


def _decode_one(item, limits: TextLimits | None) -> tuple[str | None, str | None, str | None]:
    """(text, None, None) for a text the model can serve, else (None, problem, fix)."""
    if limits is not None and isinstance(item, bytes) and (problem := limits.bytes_problem(item)):
        return None, problem, limits.text_fix  # too long to be within the limit, whatever it decodes to
    problem = text_problem(item)
    if problem:
        return None, problem, next(fix for key, fix in _FIXES.items() if problem.startswith(key))
    text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
    if limits is not None and (problem := limits.text_problem(text)):
        return None, problem, limits.text_fix
    return text, None, None


def decode_inputs(inputs: dict[str, np.ndarray], names: list[str], limits: TextLimits | None = None) -> list:
    """The request's texts (one input) or (text, text_pair) tuples (two inputs), every input checked and named in
    the error: a pair with an empty side fails with that side's name and index. With `limits`, each text is held to
    the model's length limit and the request's texts together to its request limit."""
    missing = [n for n in names if inputs.get(n) is None]
    if missing:
        raise BadRequest(
            f"the request has no {' and no '.join(repr(n) for n in missing)} input",
            f"this model takes {' and '.join(repr(n) for n in names)}, one element per item each",
        )
    columns, problems = [], []
    for name in names:
        try:
            columns.append(decode_texts(inputs[name], name, limits))
        except BadRequest as exc:
            problems.append(exc)
    if problems:
        over = all(isinstance(e, InputLimitError) for e in problems)
        raise (InputLimitError if over else BadRequest)(
            "; ".join(e.problem for e in problems), "; ".join(dict.fromkeys(e.fix for e in problems))
        )
    if limits is not None:
        problem = limits.request_problem(sum(map(len, (t for c in columns for t in c))), sum(map(len, columns)))
        if problem:
            raise InputLimitError(problem, limits.request_fix)
    if len(columns) == 1:
        return columns[0]
    if len({len(c) for c in columns}) != 1:
        raise BadRequest(
            f"{' and '.join(f'{len(c)} {n}' for c, n in zip(columns, names))} elements",
            "send one text_pair per text",
        )
    return list(zip(*columns))
