"""NER over texts longer than the model's window, measured: entity F1 on whole documents (msra_docs) with plain
truncation, in sentence windows and in sliding windows, next to the same model's sentence-level F1, and what each
reading costs in tokens and time, in-process and served, in one run (`bash scripts/bench.sh long-texts`; the table in
docs/LONG_TEXTS.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.evaluate.metrics import score
from ernie_deploy.evaluate.offline import onnx_predictions, paddle_predictions, window_of
from ernie_deploy.export.static import StaticModel
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.server.process import TritonServer
from ernie_deploy.serving.encoding import encode_whole
from ernie_deploy.serving.tokenizer import build_tokenizer
from ernie_deploy.serving.windows import default_stride, text_windows


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
    """One repository with the model three times, on one tritonserver: in sentence windows (under its name), in
    sliding windows (`<name>_sliding`) and cut at the head (`<name>_head`); each document sent alone, in order, through
    each (one tokenizer serves all three). Times: one warm pass, then the best of three."""
    from ernie_deploy.repository.build import ModelArtifacts, build

    repo = workdir / "models"
    sentences = static.spec
    sliding = replace(sentences, name=f"{sentences.name}_sliding")
    head = replace(sentences, name=f"{sentences.name}_head")
    # the three-step ensemble on the python model step, as the figures in docs/long_texts.json were measured
    built = {"runtime": "python", "layout": "ensemble"}
    models = {
        "sentences": (sentences, BuildOptions(**built, window_size=window, window_stride=stride)),
        "sliding": (sliding, BuildOptions(**built, window_size=window, window_stride=stride, window_cut="sliding")),
        "head": (head, BuildOptions(**built, long_text="head")),
    }
    for model, options in models.values():
        build(ModelArtifacts(model, onnx_path, static.vocab_file), repo, options)
    out = {}
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=workdir / "tritonserver.log") as server:
        clients = {}
        try:
            for key, (model, _) in models.items():
                clients[key] = Client(task, server.grpc_url, model=model.name)
                clients[key].check_ready()
                clients[key].predict(docs[:2], 1, progress=False)  # warm
            # rounds alternate the readings, so that a slow stretch of a shared host falls on each of them
            rounds: dict[str, list[Timed]] = {key: [] for key in models}
            for _ in range(3):
                for key, client in clients.items():
                    rounds[key].append(_timed(lambda c=client: c.predict(docs, 1, progress=False)))
            out = {key: min(timed, key=lambda t: t.seconds) for key, timed in rounds.items()}
        finally:
            for client in clients.values():
                client.close()
    return out


def _inprocess_runs(
    model: ModelSpec,
    static: StaticModel,
    onnx_path: Path,
    sentences: tuple[list[str], list],
    docs: tuple[list[str], list],
    sweep: tuple[int, ...],
) -> dict[str, tuple[tuple[list[str], list], Timed]]:
    """Each in-process way, by name -> (its texts and gold labels, its timed predictions): Paddle on the sentences,
    Paddle and ONNX on the documents cut, in sentence windows and in sliding windows of `model`'s window and stride,
    and ONNX in each window size of `sweep` (both cuts, the default stride). Each reading is `model`'s record with
    the reading changed, so that the offline code reads it as it reads any record."""

    doc_texts = docs[0]
    window, stride, _ = window_of(model)
    head = model.updated(long_text="head")

    def windows(cut: str, size: int, step: int | None) -> ModelSpec:
        # replace, not updated: a stride of None is the default stride of this window, not the record's stride
        return replace(model, long_text="window", window_size=size, window_stride=step, window_cut=cut)

    def onnx(record: ModelSpec):
        return lambda: onnx_predictions(record, onnx_path, static.vocab_file, doc_texts)

    runs = {
        "paddle sentences": (sentences, _timed(lambda: paddle_predictions(head, static, sentences[0]))),
        "paddle head": (docs, _timed(lambda: paddle_predictions(head, static, doc_texts))),
        "paddle window": (
            docs,
            _timed(lambda: paddle_predictions(windows("sentences", window, stride), static, doc_texts)),
        ),
        "paddle sliding": (
            docs,
            _timed(lambda: paddle_predictions(windows("sliding", window, stride), static, doc_texts)),
        ),
        "onnx head": (docs, _timed(onnx(head))),
        "onnx window": (docs, _timed(onnx(windows("sentences", window, stride)))),
        "onnx sliding": (docs, _timed(onnx(windows("sliding", window, stride)))),
    }
    for size in sweep:
        for cut in ("sentences", "sliding"):
            runs[f"onnx {cut} {size}"] = (docs, _timed(onnx(windows(cut, size, None))))
    return runs


def tokens_read(static: StaticModel, texts: list[str], window: int, stride: int, cut: str | None) -> int:
    """Tokens through the model for `texts`: every window's, [CLS] and [SEP] included (cut None: each text read
    once, whole, in one sequence)."""

    whole = encode_whole(build_tokenizer(static.vocab_file), texts)
    if cut is None:
        return sum(len(ids) + 2 for ids, _ in whole)
    total = 0
    for text, (ids, offsets) in zip(texts, whole):
        starts, ends = text_windows(ids, offsets, window - 2, stride, text if cut == "sentences" else None)
        total += sum(e - s + 2 for s, e in zip(starts, ends))
    return total


def _scored(task: TaskSpec, static: StaticModel, texts: list[str], gold: list, timed: Timed) -> dict:
    """One run's entity scores against the gold labels, and its time per text and per 1,000 characters."""

    scores = score(task, texts, gold, timed.predictions, static.labels)
    return {
        "f1": scores["f1"],
        "precision": scores["precision"],
        "recall": scores["recall"],
        "entities": scores["entities"],
        "seconds": timed.seconds,
        "ms_per_text": 1000 * timed.seconds / len(texts),
        "ms_per_1k_chars": 1e6 * timed.seconds / sum(len(t) for t in texts),
        "chars_per_s": sum(len(t) for t in texts) / max(timed.seconds, 1e-9),
    }


def measure(
    model: ModelSpec,
    static: StaticModel,
    onnx_path: str | Path,
    sentences: tuple[list[str], list],
    docs: tuple[list[str], list],
    *,
    sweep: tuple[int, ...] = (),
    served: bool = True,
    workdir: Path | None = None,
) -> dict:
    """The long-text table's numbers: F1 of Paddle-native predictions (sentences; documents cut at the head;
    documents in sentence windows and in sliding windows of `model`'s window and stride: its record's, else the ones
    `build` serves by default), the ONNX and served document F1 alike, seconds per document of each way, and the
    tokens each reading runs through the model; with `sweep`, ONNX document F1 and time for each of those window
    sizes and both cuts (stride half a window)."""
    import tempfile

    task = model.task_spec
    window, stride, _ = window_of(model)
    onnx_path = Path(onnx_path)
    doc_texts = docs[0]
    runs = _inprocess_runs(model, static, onnx_path, sentences, docs, sweep)
    if served:
        with tempfile.TemporaryDirectory() as tmp:
            served_runs = _served(task, static, onnx_path, doc_texts, window, stride, Path(workdir or tmp))
            for key, timed in served_runs.items():
                runs[f"served {key}"] = (docs, timed)
    once = tokens_read(static, doc_texts, window, stride, None)
    report = {
        "window": window,
        "stride": stride,
        # tokens through the model per document token read once ([CLS] and [SEP] once per document)
        "tokens": {
            "once": once,
            "sentences": tokens_read(static, doc_texts, window, stride, "sentences") / once,
            "sliding": tokens_read(static, doc_texts, window, stride, "sliding") / once,
            **{
                f"{cut} {size}": tokens_read(static, doc_texts, size, default_stride(size), cut) / once
                for size in sweep
                for cut in ("sentences", "sliding")
            },
        },
        "max_seq_len": model.max_seq_len,
        "documents": len(doc_texts),
        "characters": sum(len(t) for t in doc_texts),
        "sentences": len(sentences[0]),
        "sweep": list(sweep),
        "runs": {},
    }
    # which reading each run is, for its tokens through the model
    reading = {
        **{f"{who} window": "sentences" for who in ("paddle", "onnx")},
        "served sentences": "sentences",
        **{f"{who} sliding": "sliding" for who in ("paddle", "onnx", "served")},
        **{f"onnx {key}": key for key in report["tokens"] if key != "once"},
    }
    for name, ((texts, gold), timed) in runs.items():
        report["runs"][name] = _scored(task, static, texts, gold, timed)
        if name in reading:
            report["runs"][name]["tokens_read"] = report["tokens"][reading[name]]
    return report


def table(report: dict) -> str:
    """The report as the markdown table of docs/LONG_TEXTS.md."""
    runs = report["runs"]
    sentence = runs["paddle sentences"]["f1"]
    lines = [
        "| what | texts | entity F1 | vs sentence F1 | precision | recall | tokens read | ms per text | chars/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    window, stride = report["window"], report["stride"]
    labels = {
        "paddle sentences": "Paddle, MSRA test sentences (each read whole)",
        "paddle head": f"Paddle, documents cut at {report['max_seq_len']} tokens",
        "paddle window": f"Paddle, documents in sentence windows of up to {window}",
        "paddle sliding": f"Paddle, documents in sliding windows of {window} (stride {stride})",
        "onnx head": f"ONNX in-process, documents cut at {report['max_seq_len']} tokens",
        "onnx window": f"ONNX in-process, sentence windows of up to {window}",
        "onnx sliding": f"ONNX in-process, sliding windows of {window}",
        "served head": "served (gRPC, one document a request), cut",
        "served sentences": f"served (gRPC, one document a request), sentence windows of up to {window}",
        "served sliding": f"served (gRPC, one document a request), sliding windows of {window}",
    }
    for size in report.get("sweep", ()):
        labels[f"onnx sentences {size}"] = f"ONNX in-process, sentence windows of up to {size}"
        labels[f"onnx sliding {size}"] = f"ONNX in-process, sliding windows of {size} (stride {default_stride(size)})"
    for name, run in runs.items():
        texts = report["sentences"] if name == "paddle sentences" else report["documents"]
        shown = f"{run['tokens_read']:.2f}x" if run.get("tokens_read") else ""
        lines.append(
            f"| {labels.get(name, name)} | {texts:,} | {run['f1']:.4f} | {run['f1'] - sentence:+.4f} | "
            f"{run['precision']:.4f} | {run['recall']:.4f} | {shown} | {run['ms_per_text']:.1f} | "
            f"{run['chars_per_s']:,.0f} |"
        )
    return "\n".join(lines)
