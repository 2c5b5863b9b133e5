"""The extraction step (UIE): text and schema -> Taskflow's answer per text, tokenizer, model runs and span decoding in
one python model (serving.spans). Every request of a merged batch, each with its own schema, runs one model call per
schema depth: its stages cannot be split into ensemble steps, since each stage's prompts come from the spans the one
before found."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.profile import CONFIDENCE, SPAN_TYPE, SPANS_PER_TEXT, confidence_bucket, count_bucket
from ernie_deploy.core.tasks import SCHEMA_INPUT, TEXT_INPUT, UIE
from ernie_deploy.kinds.uie import KIND
from ernie_deploy.serving.buckets import Padding, run_in_buckets
from ernie_deploy.serving.encoding import tokenize_whole
from ernie_deploy.serving.kind_serving import KindServing
from ernie_deploy.serving.limits import TextLimits
from ernie_deploy.serving.parameters import (
    INTRA_OP_THREADS,
    MAX_REQUEST_ROWS,
    MODEL_FILE,
    ORT_SPINNING,
    POSITION_PROB,
    SCHEMA_DEFAULT,
    TOKENIZER_FILE,
    WINDOW_MAX_REQUEST_CHARS,
    WINDOW_MAX_TEXT_CHARS,
    WINDOW_SIZE,
    WINDOW_STRIDE,
)
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.schema import parse_schema
from ernie_deploy.serving.spans import extract, first_stage_rows
from ernie_deploy.serving.step import Step, split_rows
from ernie_deploy.serving.texts import decode_texts
from ernie_deploy.serving.tokenizer import load_tokenizer
from ernie_deploy.serving.watch import KindWatch, json_item

TEXT, SCHEMA, RESULT = TEXT_INPUT.name, SCHEMA_INPUT.name, UIE.prediction


def read_schemas(array: np.ndarray | None, texts: int, default) -> list:
    """The parsed schema of each of a request's `texts` texts: the `schema` input's ([texts, 1], one per text: Triton
    holds every input of a request to one batch size), else `default` (the one the model was built with; None: the
    request must send one)."""
    if array is None:
        if default is None:
            raise BadRequest(
                "no schema: this model was built without one, so each request says what to extract",
                'send a "schema" input (JSON, e.g. ["人名", "地名"]), or build the model with --schema',
            )
        return [default] * texts
    if array.dtype != np.object_:
        raise BadRequest(
            f"input 'schema' has dtype {array.dtype}; expected BYTES (TYPE_STRING)",
            "send each schema as a UTF-8 JSON string in a BYTES tensor of shape [batch, 1]",
        )
    items = array.reshape(-1)
    if len(items) != texts:
        raise BadRequest(f"{len(items)} schemas for {texts} texts", "send one schema per text")
    parsed = []
    for i, item in enumerate(items):
        try:
            value = json.loads(item.decode("utf-8") if isinstance(item, bytes) else item)
        except (ValueError, UnicodeDecodeError, AttributeError) as exc:
            raise BadRequest(
                f"schema {i} is not JSON: {exc}", 'send the schema as JSON, e.g. ["人名"] or {"人物": ["出生地"]}'
            ) from None
        parsed.append(parse_schema(value))
    return parsed


class ExtractionStep(Step):
    """text [B, 1] BYTES and schema [B, 1] BYTES (optional) -> result [B, 1] BYTES: per text, the JSON of Taskflow's
    answer, character offsets into the text as sent."""

    # Rows per onnxruntime run: bounds the activations a request of many windows and types holds at once (as the
    # windowed model step's WINDOW_CHUNK does).
    ROW_CHUNK = 256

    def __init__(self, config: dict, version_dir: Path):

        version_dir = Path(version_dir)
        self.tokenizer = load_tokenizer(version_dir / TOKENIZER_FILE.read(config))
        self.model = OnnxModel(
            version_dir / MODEL_FILE.read(config),
            intra_op_threads=INTRA_OP_THREADS.read(config),
            spinning=ORT_SPINNING.read(config),
            outputs=KIND.model_outputs,
        )
        self.row_tokens = WINDOW_SIZE.read(config)  # a row: [CLS] prompt [SEP] text window [SEP]
        self.stride = WINDOW_STRIDE.read(config)
        self.limits = TextLimits(WINDOW_MAX_TEXT_CHARS.read(config), WINDOW_MAX_REQUEST_CHARS.read(config))
        default = SCHEMA_DEFAULT.read(config)
        self.default = None if default is None else parse_schema(default)
        self.position_prob = POSITION_PROB.read(config)
        self.max_rows = MAX_REQUEST_ROWS.read(config)
        self.padding = Padding()  # every call's tokens run and real, summed (benchmarks/uie.py reports the ratio)

    def check(self, inputs):

        texts = decode_texts(inputs[TEXT], TEXT, self.limits)
        schemas = read_schemas(inputs.get(SCHEMA), len(texts), self.default)
        encodings = tokenize_whole(self.tokenizer, texts)
        rows = sum(first_stage_rows(self.tokenizer, encodings, schemas, self.row_tokens, self.stride))
        if rows > self.max_rows:
            raise BadRequest(
                f"this request's texts and schema types take {rows} model rows (texts x types x windows of "
                f"{self.row_tokens} tokens), more than the {self.max_rows} one request may",
                "send fewer texts, shorter texts or fewer types per request",
            )
        return texts, schemas, encodings

    def run(self, items, requested=None):

        texts = [t for own, _, _ in items for t in own]
        schemas = [s for _, own, _ in items for s in own]
        encodings = [e for _, _, own in items for e in own]
        answers = extract(
            self.tokenizer,
            texts,
            schemas,
            self._run,
            max_seq_len=self.row_tokens,
            stride=self.stride,
            position_prob=self.position_prob,
            encodings=encodings,
        )
        out = np.array([json.dumps(a, ensure_ascii=False).encode("utf-8") for a in answers], dtype=np.object_)
        return [{RESULT: out[rows].reshape(-1, 1)} for rows in split_rows([len(own) for own, _, _ in items])]

    def _run(self, rows):
        """Every row of a stage, in buckets of similar token length (serving.buckets): merged requests' rows, each
        text's types and windows, differ in length, and one call pads them all to its longest."""
        (start, end), padding = run_in_buckets(
            self.model.run, rows.input_ids, rows.token_type_ids, rows.lengths, max_rows=self.ROW_CHUNK
        )
        self.padding += padding
        return start, end


def _walk(spans_by_type: dict):
    """(type, span) for every span of an answer, its relations' spans too."""
    for name, spans in spans_by_type.items():
        for span in spans:
            yield name, span
            yield from _walk(span.get("relations") or {})


def _answers(outputs: dict, labels: list[str]) -> list[tuple]:
    """Each text's spans as sorted (type, start, end) with their probabilities, relations included."""
    out = []
    for raw in np.asarray(outputs[RESULT]).reshape(-1):
        answer = json_item(raw)
        out.append(tuple(sorted((t, s["start"], s["end"], round(s["probability"], 4)) for t, s in _walk(answer))))
    return out


def _profile(answer) -> list[tuple[str, str]]:
    return [
        *((SPAN_TYPE, kind) for kind, _, _, _ in answer),
        *((CONFIDENCE, confidence_bucket(p)) for _, _, _, p in answer),
        (SPANS_PER_TEXT, count_bucket(len(answer))),
    ]


# What a text's spans are to the watch (serving.watch): their types, how many a text holds, and how sure the model was
# of each (a span's probability, in the confidence buckets); two answers agree on the whole set of spans.
WATCH = KindWatch(
    series=(SPAN_TYPE, SPANS_PER_TEXT, CONFIDENCE),
    needs=(RESULT,),
    read=_answers,
    profile=_profile,
    key=lambda answer: tuple(span[:3] for span in answer),
)


# What the serving layer reads of this kind (listed in serving.postprocess_steps): its postprocess step, served
# under the kind's `postprocess` key (serving.steps.STEPS): the whole extraction, as one python model; and its part
# of the watch. No other wire: PaddleNLP's ERNIE 3.0 Triton pipeline served no UIE models.
SERVING = KindServing(postprocess=ExtractionStep, watch=WATCH)
