"""What every serving step is: built from its model config (the dict Triton passes to `initialize`) and the version
folder holding its files, it maps the requests Triton merged into one `execute` (each a dict of numpy arrays) to
their outputs, checking each request alone and running the good ones as one batch. A step reads its config's
parameters through serving.parameters, the one schema of their names, types and defaults."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadRepositoryError, ErnieDeployError, FailedRequestsError


def read_labels(labels_file: Path) -> list[str]:
    """The label names a step's version folder holds (labels.json), in id order."""
    if not labels_file.exists():
        raise BadRepositoryError(f"no label names at {labels_file}", "rebuild the repository with `ernie-deploy build`")
    return json.loads(labels_file.read_text(encoding="utf-8"))


class Step:
    """A serving step. Triton hands a python model every request its dynamic batcher merged into one
    `execute`; a step checks each request alone (a bad one fails with its own message, the rest go on)
    and then runs all the good ones as ONE batch: one tokenizer call, one onnxruntime run. That merged
    run, not a loop per request, is what makes dynamic batching pay off in a python backend."""

    def check(self, inputs: dict[str, np.ndarray]):
        """Validate and unpack one request; raise BadRequest naming what is wrong with it."""
        return inputs

    def check_request(self, inputs: dict[str, np.ndarray], wanted: set[str] | None):
        """`check`, for a step whose checks depend on what the request asks of it (`wanted`: its output names; None:
        all)."""
        return self.check(inputs)

    def run(self, items: list, requested: set[str] | None) -> list[dict[str, np.ndarray]]:
        """The checked requests -> their outputs, in order; `requested`: the outputs anyone reads (None: all)."""
        raise NotImplementedError

    def run_requests(
        self,
        requests: list[dict[str, np.ndarray]],
        requested: set[str] | None = None,
        wanted: list[set[str]] | None = None,
    ) -> list[dict[str, np.ndarray] | ErnieDeployError]:
        """`requested`: the outputs any request reads (None: all); `wanted`: each request's own (None: `requested`)."""
        results: list = [None] * len(requests)
        good, items = [], []
        for i, inputs in enumerate(requests):
            try:
                items.append(self.check_request(inputs, requested if wanted is None else wanted[i]))
                good.append(i)
            except ErnieDeployError as exc:
                results[i] = exc
        if items:
            try:
                outputs = self.run(items, requested)
            except ErnieDeployError as exc:  # a fault of the model, not of one request: every request hears it
                outputs = [exc] * len(items)
            except Exception:
                # Something in one request broke the merged run (say, a token id past the vocabulary sent
                # straight to the model step): run them one by one so only the culprit fails.
                outputs = [self._run_alone(item, requested) for item in items]
            for i, out in zip(good, outputs):
                results[i] = out
        return results

    def _run_alone(self, item, requested):
        try:
            return self.run([item], requested)[0]
        except ErnieDeployError as exc:
            return exc
        except Exception as exc:
            return FailedRequestsError(
                f"{type(self).__name__} failed on this request: {exc}",
                "check the request's tensors against the model's config",
            )

    def close(self) -> None:
        """Called when Triton unloads the model: a step that holds threads or counts ends them here."""

    def __call__(self, inputs: dict[str, np.ndarray], requested: set[str] | None = None) -> dict[str, np.ndarray]:
        """One request, as a plain function (tests, offline use)."""
        result = self.run_requests([inputs], requested)[0]
        if isinstance(result, ErnieDeployError):
            raise result
        return result


def split_rows(counts: list[int]) -> list[slice]:
    """The rows of each request in a merged batch, from the requests' row counts."""
    # Summed in Python: numpy's cumsum and the int() of each bound took 4.5 us a call for one request (timeit, best
    # of 5), this 0.3 us; a fused step calls it two to four times an execute (benchmarks/lone_request.py).
    out, start = [], 0
    for count in counts:
        out.append(slice(start, start + int(count)))
        start += int(count)
    return out
