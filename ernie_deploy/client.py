"""gRPC client for the served ensembles (tritonclient), with readiness checks and batching."""

from __future__ import annotations

import numpy as np

from .errors import ErnieDeployError
from .tasks import TEXT_INPUT, TaskSpec

DEFAULT_URL = "127.0.0.1:8001"


class Client:
    def __init__(self, task: TaskSpec, url: str = DEFAULT_URL, *, timeout_s: float = 60.0):
        import tritonclient.grpc as grpcclient

        self.task = task
        self.url = url
        self.timeout_s = timeout_s
        self._grpc = grpcclient
        self.client = grpcclient.InferenceServerClient(url=url)

    def check_ready(self) -> None:
        """Fail with a clear message when the server or the model is not there."""
        from tritonclient.utils import InferenceServerException

        try:
            live = self.client.is_server_live()
        except InferenceServerException as exc:
            raise ErnieDeployError(f"no Triton server answers at {self.url} ({exc.message()})",
                                   "start one with `ernie-deploy serve models/` or pass --url") from None
        if not live or not self.client.is_server_ready():
            raise ErnieDeployError(f"the Triton server at {self.url} is not ready", "wait for it to finish loading")
        model = self.task.ensemble
        if not self.client.is_model_ready(model):
            raise ErnieDeployError(f"model {model!r} is not ready on {self.url}",
                                   "check the server log; build it with `scripts/convert.sh`")

    def infer(self, texts: list[str]) -> dict[str, np.ndarray]:
        """One request holding `texts`; returns every output of the ensemble, first axis = texts."""
        from tritonclient.utils import InferenceServerException

        data = np.array([t.encode("utf-8") for t in texts], dtype=np.object_).reshape(-1, 1)
        tensor = self._grpc.InferInput(TEXT_INPUT.name, list(data.shape), "BYTES")
        tensor.set_data_from_numpy(data)
        outputs = [self._grpc.InferRequestedOutput(o.name) for o in self.task.outputs]
        try:
            result = self.client.infer(self.task.ensemble, [tensor], outputs=outputs, client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise ErnieDeployError(f"inference on {self.task.ensemble!r} failed: {exc.message()}") from None
        return {o.name: result.as_numpy(o.name) for o in self.task.outputs}

    def infer_all(self, texts: list[str], batch_size: int = 32, progress: bool = True) -> dict[str, np.ndarray]:
        from tqdm import tqdm

        parts: dict[str, list[np.ndarray]] = {o.name: [] for o in self.task.outputs}
        starts = range(0, len(texts), batch_size)
        for start in tqdm(starts, desc=f"{self.task.ensemble} over gRPC", unit="batch", disable=not progress):
            for name, value in self.infer(texts[start:start + batch_size]).items():
                parts[name].append(value)
        return {name: np.concatenate(values) for name, values in parts.items()}

    def predict(self, texts: list[str], batch_size: int = 32, progress: bool = True) -> list:
        """Per-text predictions as `evaluate` makes them offline: label names (seq_cls) or entity lists."""
        return decode_outputs(self.task, self.infer_all(texts, batch_size, progress))

    def close(self) -> None:
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def decode_outputs(task: TaskSpec, out: dict[str, np.ndarray]) -> list:
    if task.metric == "accuracy":
        return [label.decode("utf-8") for label in out["label"][:, 0]]
    from .entities import entities_from_json

    return [entities_from_json(item) for item in out["entities"][:, 0]]


def main(task: TaskSpec, argv: list[str] | None = None, doc: str | None = None) -> int:
    """The gRPC client scripts (clients/*_grpc_client.py): score a split, or print predictions for --text."""
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=DEFAULT_URL, help="Triton gRPC address (default %(default)s)")
    parser.add_argument("--data", help=f"a {task.split_format.upper()} split file (default: the {task.dataset} "
                                       "test split)")
    parser.add_argument("--text", action="append", help="run this text and print the result (repeatable)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--report", help="write the scores as JSON")
    args = parser.parse_args(argv)
    try:
        with Client(task, args.url) as client:
            client.check_ready()
            if args.text:
                out = client.infer(args.text)
                for i, (text, pred) in enumerate(zip(args.text, decode_outputs(task, out))):
                    if task.metric == "accuracy":
                        print(f"{pred}\t{out['confidence'][i, 0]:.4f}\t{text}")
                    else:
                        note = "  (truncated: entities past max_seq_len are not found)" if out["truncated"][i, 0] else ""
                        print(f"{text}{note}")
                        print(json.dumps(pred, ensure_ascii=False, indent=2))
                return 0
            from .data import data_dir, read_split, read_split_file
            from .metrics import format_report, score, write_json

            if args.data:
                texts, gold = read_split_file(args.data)
            else:
                texts, gold = read_split(data_dir(task.dataset), "test", task.split_format)
            predicted = client.predict(texts, args.batch_size)
        labels = sorted(set(gold)) if task.metric == "accuracy" else []
        report = score(task, texts, gold, predicted, labels)
        print(format_report(report))
        if args.report:
            write_json(report, args.report)
        print(f"{task.metric}: {report[task.metric]:.4f} (n={report['n']})")
        return 0
    except ErnieDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
