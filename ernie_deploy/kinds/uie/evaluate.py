"""How extraction answers are scored, reported and shown: span precision, recall and F1, per type and overall, of the
top-level spans a schema of entity types finds, against the spans of a split's per-character tags (MSRA NER: a
PER, LOC or ORG entity is a span of the type its prompt names, ENTITY_PROMPTS)."""

from __future__ import annotations

import json

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.evaluate.kind_evaluate import KindEvaluate
from ernie_deploy.evaluate.tables import type_table
from ernie_deploy.evaluate.windows import window_of
from ernie_deploy.export.uie import static_runner
from ernie_deploy.fetch.data import read_split_file
from ernie_deploy.kinds.uie import ENTITY_PROMPTS, KIND
from ernie_deploy.serving.entities import bio_spans
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.spans import DEFAULT_POSITION_PROB, extract
from ernie_deploy.serving.tokenizer import build_tokenizer


def gold_spans(tags: list[str]) -> set[tuple[str, int, int]]:
    """(prompt, start, end) of each entity in a text's per-character BIO tags, end exclusive."""

    return {(ENTITY_PROMPTS.get(kind, kind), start, end) for kind, start, end in bio_spans(tags)}


def answer_spans(answer: dict) -> set[tuple[str, int, int]]:
    """(type, start, end) of each top-level span of one text's answer (Taskflow's shape)."""
    return {(kind, int(span["start"]), int(span["end"])) for kind, spans in answer.items() for span in spans}


def _prf(hit: int, predicted: int, gold: int) -> dict:
    precision = hit / predicted if predicted else 0.0
    recall = hit / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": gold}


def score(texts: list[str], gold: list[list[str]], predicted: list[dict], labels: list[str]) -> dict:
    """Span-level scores: a span counts only where its type, start and end all match a gold one (micro over types)."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold texts but {len(predicted)} answers")
    truth = [gold_spans(tags) for tags in gold]
    found = [answer_spans(answer) for answer in predicted]
    types = sorted({kind for spans in (*truth, *found) for kind, _, _ in spans} | set(labels))
    per_type = {}
    for kind in types:
        hit = sum(len({s for s in f if s[0] == kind} & t) for f, t in zip(found, truth))
        per_type[kind] = _prf(
            hit, sum(1 for f in found for s in f if s[0] == kind), sum(1 for t in truth for s in t if s[0] == kind)
        )
    overall = _prf(sum(len(f & t) for f, t in zip(found, truth)), sum(map(len, found)), sum(map(len, truth)))
    return {
        "metric": "span_f1",
        "span_f1": overall["f1"],
        "precision": overall["precision"],
        "recall": overall["recall"],
        "n": len(gold),
        "spans": overall["support"],
        "per_type": per_type,
    }


def format_report(report: dict) -> str:
    overall = {"precision": report["precision"], "recall": report["recall"], "f1": report["span_f1"]}
    return type_table(report["per_type"], {**overall, "support": report["spans"]})


def show(text, prediction: dict, out: dict, i: int) -> None:
    """The text, then its answer as one line of JSON (what `json.loads` reads back)."""
    print(text[0] if isinstance(text, tuple) else text)  # a text sent with its schema: the text
    print(json.dumps(prediction, ensure_ascii=False), flush=True)


def predict(labels: list[str], logits, enc, texts: list[str]) -> list:
    """Extraction has no one-pass logits to read: its answers come from staged model runs (serving.spans.extract)."""

    raise BadOptionsError(
        "an extraction model's answers are not read from one batch of logits",
        "evaluate it with serving.spans.extract over the model (kinds/uie/evaluate.py extract_answers)",
    )


def paddle_runner(model, batch_size: int = 64):
    """A `run(rows) -> (start_probs, end_probs)` for serving.spans.extract over a paddlenlp UIE model in dygraph
    (eval mode, no gradients), in batches of `batch_size` rows; positions and the padding mask are the model's
    defaults, as in the exported program (export/uie.py)."""
    import numpy as np
    import paddle

    model.eval()

    def run(rows):
        starts, ends = [], []
        with paddle.no_grad():
            for at in range(0, len(rows), batch_size):
                part = slice(at, at + batch_size)
                start, end = model(
                    paddle.to_tensor(rows.input_ids[part]), token_type_ids=paddle.to_tensor(rows.token_type_ids[part])
                )
                starts.append(start.numpy())
                ends.append(end.numpy())
        return np.concatenate(starts), np.concatenate(ends)

    return run


def extract_answers(
    run, tokenizer, texts: list[str], schema, max_seq_len: int, *, stride=None, position_prob=None, chunk: int = 256
) -> list[dict]:
    """Each text's answer (Taskflow's shape) from serving.spans.extract over `run`, `chunk` texts a call so that
    the rows of a whole split are not padded to its longest text at once."""

    prob = DEFAULT_POSITION_PROB if position_prob is None else position_prob
    answers: list[dict] = []
    for at in range(0, len(texts), chunk):
        answers += extract(
            tokenizer, texts[at : at + chunk], schema, run, max_seq_len=max_seq_len, stride=stride, position_prob=prob
        )
    return answers


def evaluate_offline(model, static, onnx_path, split_file) -> dict:
    """{"paddle": report, "onnx": report}: the static model (Paddle Inference) and the converted one (onnxruntime)
    extracting the spans of a split of per-character tags with the schema the model answers by default (its record's,
    else its labels, else ENTITY_PROMPTS'), read as the record says it is served: rows of its window size, a new
    window every stride, spans past its position_prob (evaluate.windows.window_of decides what the record leaves
    open, as `build` does)."""

    texts, gold = read_split_file(split_file)
    schema = model.schema or list(model.labels) or list(ENTITY_PROMPTS.values())
    tokenizer = build_tokenizer(static.vocab_file, lowercase=model.do_lower_case)
    windows = window_of(model)
    runners = {"paddle": static_runner(static), "onnx": OnnxModel(onnx_path, outputs=KIND.model_outputs).run}
    reports = {}
    for name, run in runners.items():
        answers = extract_answers(
            _rows_runner(run),
            tokenizer,
            texts,
            schema,
            windows.size,
            stride=windows.stride,
            position_prob=model.position_prob,
        )
        reports[name] = score(texts, gold, answers, list(model.labels))
    return reports


def _rows_runner(run, batch_size: int = 64):
    """`run(input_ids, token_type_ids) -> [start, end]` as serving.spans' `run(rows)`, `batch_size` rows a call."""
    import numpy as np

    def rows_run(rows):
        parts = [
            run(rows.input_ids[at : at + batch_size], rows.token_type_ids[at : at + batch_size])
            for at in range(0, len(rows), batch_size)
        ]
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(2))

    return rows_run


# What the evaluation reads of this kind (listed in evaluate.metrics).
EVALUATE = KindEvaluate(predict=predict, score=score, format_report=format_report, show=show, offline=evaluate_offline)
