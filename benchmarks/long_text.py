"""NER over texts longer than the model's window, measured: entity F1 on whole documents (msra_docs) with plain
truncation and with sliding windows, next to the same model's sentence-level F1, and what the windows cost in time,
in-process and served, in one run (`ernie-deploy long-texts`; the table in docs/LONG_TEXTS.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.export.static import StaticModel


@dataclass
class Timed:
    predictions: list
    seconds: float


def _timed(fn) -> Timed:
    t0 = time.perf_counter()
    out = fn()
    return Timed(out, time.perf_counter() - t0)


def _served(
    task: TaskSpec, static: StaticModel, onnx_path: Path, docs: list[str], window: int, stride: int, workdir: Path
):
    """One repository with the model twice, windowed (under its name) and cut at the head (`<name>_head`), on one
    tritonserver: each document sent alone, in order, through each (one tokenizer serves both)."""
    from dataclasses import replace

    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.repository.build import ModelArtifacts, build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    repo = workdir / "models"
    windowed = static.spec
    head = replace(windowed, name=f"{windowed.name}_head")
    # the three-step ensemble on the python model step, as the figures in docs/long_texts.json were measured
    built = {"runtime": "python", "layout": "ensemble"}
    for model, options in (
        (windowed, BuildOptions(**built, window_size=window, window_stride=stride)),
        (head, BuildOptions(**built, long_text="head")),
    ):
        build(ModelArtifacts(model, onnx_path, static.vocab_file), repo, options)
    out = {}
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=workdir / "tritonserver.log") as server:
        for key, model in (("window", windowed), ("head", head)):
            with Client(task, server.grpc_url, model=model.name) as client:
                client.check_ready()
                client.predict(docs[:2], 1, progress=False)  # warm
                out[key] = _timed(lambda c=client: c.predict(docs, 1, progress=False))
    return out


def _inprocess_runs(
    task: TaskSpec,
    static: StaticModel,
    onnx_path: Path,
    sentences: tuple[list[str], list],
    docs: tuple[list[str], list],
    window: int,
    stride: int,
    sweep: tuple[int, ...],
) -> dict[str, tuple[tuple[list[str], list], Timed]]:
    """Each in-process way, by name -> (its texts and gold labels, its timed predictions): Paddle on the sentences,
    Paddle and ONNX on the documents cut and in windows, and ONNX in each window size of `sweep`."""
    from ernie_deploy.evaluate.offline import (
        onnx_predictions,
        onnx_window_predictions,
        paddle_predictions,
        paddle_window_predictions,
    )

    doc_texts = docs[0]
    runs = {
        "paddle sentences": (sentences, _timed(lambda: paddle_predictions(task, static, sentences[0]))),
        "paddle head": (docs, _timed(lambda: paddle_predictions(task, static, doc_texts))),
        "paddle window": (
            docs,
            _timed(lambda: paddle_window_predictions(task, static, doc_texts, stride, window=window)),
        ),
        "onnx head": (
            docs,
            _timed(
                lambda: onnx_predictions(
                    task, onnx_path, static.vocab_file, static.labels, doc_texts, max_seq_len=static.spec.max_seq_len
                )
            ),
        ),
        "onnx window": (
            docs,
            _timed(
                lambda: onnx_window_predictions(
                    task, onnx_path, static.vocab_file, static.labels, doc_texts, stride, window=window
                )
            ),
        ),
    }
    for size in sweep:
        runs[f"onnx window {size}"] = (
            docs,
            _timed(
                lambda size=size: onnx_window_predictions(
                    task, onnx_path, static.vocab_file, static.labels, doc_texts, window=size
                )
            ),
        )
    return runs


def _scored(task: TaskSpec, static: StaticModel, texts: list[str], gold: list, timed: Timed) -> dict:
    """One run's entity scores against the gold labels, and its time per text and per 1,000 characters."""
    from ernie_deploy.evaluate.metrics import score

    scores = score(task, texts, gold, timed.predictions, static.labels)
    return {
        "f1": scores["f1"],
        "precision": scores["precision"],
        "recall": scores["recall"],
        "entities": scores["entities"],
        "seconds": timed.seconds,
        "ms_per_text": 1000 * timed.seconds / len(texts),
        "ms_per_1k_chars": 1e6 * timed.seconds / sum(len(t) for t in texts),
    }


def measure(
    task: TaskSpec,
    static: StaticModel,
    onnx_path: str | Path,
    sentences: tuple[list[str], list],
    docs: tuple[list[str], list],
    *,
    window: int | None = None,
    stride: int | None = None,
    sweep: tuple[int, ...] = (),
    served: bool = True,
    workdir: Path | None = None,
) -> dict:
    """The long-text table's numbers: F1 of Paddle-native predictions (sentences; documents cut at the head;
    documents in windows of `window` tokens), the ONNX and served document F1 alike, and seconds per document of
    each way; with `sweep`, ONNX document F1 and time for each of those window sizes (stride half a window)."""
    import tempfile

    from ernie_deploy.serving.windows import default_stride

    window = window or static.spec.max_seq_len
    stride = stride or default_stride(window)
    onnx_path = Path(onnx_path)
    doc_texts = docs[0]
    runs = _inprocess_runs(task, static, onnx_path, sentences, docs, window, stride, sweep)
    if served:
        with tempfile.TemporaryDirectory() as tmp:
            served_runs = _served(task, static, onnx_path, doc_texts, window, stride, Path(workdir or tmp))
            for key, timed in served_runs.items():
                runs[f"served {key}"] = (docs, timed)
    report = {
        "window": window,
        "stride": stride,
        "max_seq_len": static.spec.max_seq_len,
        "documents": len(doc_texts),
        "characters": sum(len(t) for t in doc_texts),
        "sentences": len(sentences[0]),
        "sweep": list(sweep),
        "runs": {},
    }
    for name, ((texts, gold), timed) in runs.items():
        report["runs"][name] = _scored(task, static, texts, gold, timed)
    return report


def table(report: dict) -> str:
    """The report as the markdown table of docs/LONG_TEXTS.md."""
    runs = report["runs"]
    sentence = runs["paddle sentences"]["f1"]
    lines = [
        "| what | texts | entity F1 | vs sentence F1 | precision | recall | ms per text | ms per 1k chars |",
        "|---|---|---|---|---|---|---|---|",
    ]
    labels = {
        "paddle sentences": "Paddle, MSRA test sentences (each fits)",
        "paddle head": "Paddle, documents cut at 128 tokens",
        "paddle window": f"Paddle, documents in windows of {report['window']} (stride {report['stride']})",
        "onnx head": "ONNX in-process, documents cut at 128 tokens",
        "onnx window": f"ONNX in-process, documents in windows of {report['window']}",
        "served head": "served (gRPC, one document a request), cut",
        "served window": f"served (gRPC, one document a request), windows of {report['window']}",
    }
    for size in report.get("sweep", ()):
        labels[f"onnx window {size}"] = f"ONNX in-process, windows of {size} (stride {(size - 2) // 2})"
    for name, run in runs.items():
        texts = report["sentences"] if name == "paddle sentences" else report["documents"]
        lines.append(
            f"| {labels.get(name, name)} | {texts:,} | {run['f1']:.4f} | {run['f1'] - sentence:+.4f} | "
            f"{run['precision']:.4f} | {run['recall']:.4f} | {run['ms_per_text']:.1f} | {run['ms_per_1k_chars']:.1f} |"
        )
    return "\n".join(lines)
