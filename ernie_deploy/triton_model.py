"""The adapter between Triton's python backend and a step from `ernie_deploy.steps`.

A repository's model.py subclasses `StepModel` and names its step; everything else is here, tested once.
`triton_python_backend_utils` exists only inside Triton's python stub, so it is imported lazily.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import ErnieDeployError


class StepModel:
    step: str = ""  # key in ernie_deploy.steps.STEPS, set by each model.py

    def initialize(self, args: dict) -> None:
        import triton_python_backend_utils as pb_utils

        from .steps import STEPS

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

    def execute(self, requests):
        pb = self.pb
        responses = []
        for request in requests:
            try:
                inputs = {name: pb.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
                # Compute and send only what the ensemble reads from this step (e.g. no offsets for seq_cls).
                requested = set(request.requested_output_names()) or set(self.outputs)
                if self.step == "tokenizer":
                    outputs = self.impl(inputs, requested)
                else:
                    outputs = self.impl(inputs)
                tensors = [pb.Tensor(name, outputs[name]) for name in self.outputs if name in requested]
                responses.append(pb.InferenceResponse(output_tensors=tensors))
            except ErnieDeployError as exc:
                # A bad request fails alone, with a message; the model and the server stay up.
                responses.append(pb.InferenceResponse(error=pb.TritonError(str(exc))))
        return responses
