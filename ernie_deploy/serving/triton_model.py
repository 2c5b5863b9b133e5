"""The adapter between Triton's python backend and a step from `ernie_deploy.serving.steps`.

A repository's model.py subclasses `StepModel` and names its step; everything else is here, tested once.
`triton_python_backend_utils` exists only inside Triton's python stub, so it is imported lazily.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ernie_deploy.core.errors import BadRequest, ErnieDeployError
from ernie_deploy.serving.steps import STEPS
from ernie_deploy.serving.timing import PhaseTimer, instrument, timing_folder


class StepModel:
    step: str = ""  # key in ernie_deploy.serving.steps.STEPS, set by each model.py
    timer: PhaseTimer | None = None  # set where the environment asks for timings (serving.timing); off by default

    def initialize(self, args: dict) -> None:
        import triton_python_backend_utils as pb_utils

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]
        try:
            self.impl = STEPS[self.step](config, version_dir)
        except ErnieDeployError as exc:
            # Raising here makes Triton report the model as failed to load, with this message.
            raise pb_utils.TritonModelException(f"{config['name']}: {exc}") from None
        folder = timing_folder()
        if folder is not None:
            self.timer = PhaseTimer(folder / f"{config['name']}.{os.getpid()}.csv")
            instrument(self.impl, self.timer)

    def execute(self, requests):
        if self.timer is not None:
            return self._timed_execute(requests)
        inputs, wanted = self._read(requests)
        # All requests of this execute run as one batch; a bad request fails alone, with its message,
        # and the model and the server stay up.
        results = self.impl.run_requests(inputs, set().union(*wanted), wanted)
        return self._responses(results, wanted)

    def _read(self, requests) -> tuple[list[dict], list[set[str]]]:
        pb = self.pb
        inputs, wanted = [], []
        for request in requests:
            tensors = {name: pb.get_input_tensor_by_name(request, name) for name in self.inputs}
            # An optional input the request left out is None: the step names it in its error.
            inputs.append({name: None if t is None else t.as_numpy() for name, t in tensors.items()})
            # Compute and send only what the ensemble reads from this step (e.g. no offsets for seq_cls).
            wanted.append(set(request.requested_output_names()) or set(self.outputs))
        return inputs, wanted

    def _responses(self, results, wanted):
        pb = self.pb
        responses = []
        for result, names in zip(results, wanted):
            if isinstance(result, ErnieDeployError):
                # INVALID_ARG for a fault of the request (clients must not retry it), INTERNAL otherwise.
                code = pb.TritonError.INVALID_ARG if isinstance(result, BadRequest) else pb.TritonError.INTERNAL
                responses.append(pb.InferenceResponse(error=pb.TritonError(str(result), code)))
            else:
                tensors = [pb.Tensor(name, result[name]) for name in self.outputs if name in names]
                responses.append(pb.InferenceResponse(output_tensors=tensors))
        return responses

    def _timed_execute(self, requests):
        """`execute` with each phase timed (serving.timing): the same calls, a clock read between them."""
        now, timer = time.perf_counter_ns, self.timer
        start = now()
        inputs, wanted = self._read(requests)
        t1 = now()
        results = self.impl.run_requests(inputs, set().union(*wanted), wanted)
        t2 = now()
        responses = self._responses(results, wanted)
        end = now()
        timer.add("inputs", t1 - start)
        timer.add("response", end - t2)
        timer.done(len(requests), start, end, t2 - t1)
        return responses

    def finalize(self) -> None:
        impl = getattr(self, "impl", None)
        if impl is not None:
            impl.close()
        if self.timer is not None:
            self.timer.close()
