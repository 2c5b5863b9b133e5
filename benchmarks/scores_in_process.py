"""The scores-cost bench's in-process part (benchmarks/scores_cost.py runs it after the served rounds): the fused step
of each build, as Triton's python stub calls it (`Step.run_requests` with each request's named outputs), timed with
timeit on the test texts in the python of its own source tree: one request a call (what concurrency 1 sends) and 8
requests merged into a call (what Triton's batcher hands the step at concurrency 8). A served difference of a few
percent is within the noise of a shared host; this says in microseconds what the step itself does differently.

Run as a script by the bench, once per tree and in turn, in that tree's folder with it first on PYTHONPATH:
    python benchmarks/scores_in_process.py MODEL_DIR TEXTS_JSON NAMED_JSON PASSES
and prints {"c1": us per text, "c8": us per text} (each its best pass).
"""

from __future__ import annotations

import json
import sys
import timeit
from pathlib import Path

from ernie_deploy.serving.steps import STEPS

MERGED = 8  # requests a call at concurrency 8


def step_config(model_dir: Path) -> dict:
    """A model's config.pbtxt as the python backend hands it to a step (its JSON form)."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2 as mc

    message = text_format.Parse((model_dir / "config.pbtxt").read_text(encoding="utf-8"), mc.ModelConfig())
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def time_step(model_dir: Path, texts: list[str], named: list[str], passes: int) -> dict:
    import numpy as np

    config = step_config(model_dir)
    step = STEPS["pipeline"](config, model_dir / "1")
    name = config["input"][0]["name"]
    requests = [{name: np.array([[t.encode("utf-8")]], dtype=np.object_)} for t in texts]
    wanted = set(named)
    calls = {
        "c1": [[r] for r in requests],
        "c8": [requests[i : i + MERGED] for i in range(0, len(requests), MERGED)],
    }

    def run(batches):
        return lambda: [step.run_requests(b, wanted, [wanted] * len(b)) for b in batches]

    for batches in calls.values():  # warm: onnxruntime's first runs, the tokenizer's caches
        run(batches)()
    best = {key: float("inf") for key in calls}
    for _ in range(passes):
        for key, batches in calls.items():
            best[key] = min(best[key], 1e6 * timeit.timeit(run(batches), number=1) / len(requests))
    step.close()
    return best


if __name__ == "__main__":
    folder, texts_file, named_json, passes = sys.argv[1:5]
    texts = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    print(json.dumps(time_step(Path(folder), texts, json.loads(named_json), int(passes))))
