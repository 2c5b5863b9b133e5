"""The retrieval kinds scored offline, exactly as their clients score them served (evaluate.retrieval): Paddle-native
(paddlenlp's tokenizer, Paddle Inference over the static model) and ONNX (the serving tokenizer, onnxruntime). A
rerank model re-orders the top candidates of the embed model it is scored with (its `proposer`), each path with its
own: the Paddle ranking re-orders the Paddle embed model's candidates, the ONNX ranking the ONNX model's.

`evaluate` scores a model of any kind: a kind scored text by text goes to evaluate.offline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.evaluate import offline
from ernie_deploy.evaluate.retrieval import rerank_report
from ernie_deploy.export.static import PaddlePredictor, StaticModel
from ernie_deploy.fetch.data import read_split_file
from ernie_deploy.kinds.rerank.serving import sigmoid
from ernie_deploy.serving.encoding import encode_items
from ernie_deploy.serving.ranking import CANDIDATES, K, ranking_report, searches, top_k, unit
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.tokenizer import build_tokenizer

# One path's answers: texts (or (query, text) pairs) -> the served answer of each, stacked.
Reader = Callable[[list], np.ndarray]
# (record, static model, ONNX path): a model's three artifacts, as the pipeline's conversion leaves them.
Artifacts = tuple[ModelSpec, StaticModel, Path]


def _reader(model: ModelSpec, encode, run, batch_size: int = 64) -> Reader:
    """Each item's graph output in length-sorted batches, as the postprocess step answers it: a score is the sigmoid of
    its logit unless the record keeps the logit (`scoring`); a vector is answered as the graph gives it."""

    def read(items: list) -> np.ndarray:
        out: list = [None] * len(items)
        for idx, batch in offline.length_batches(items, batch_size):
            enc = encode(batch)
            for i, value in zip(idx, np.asarray(run(enc.input_ids, enc.token_type_ids), dtype=np.float32)):
                out[i] = value
        answers = np.stack(out)
        return sigmoid(answers) if model.scoring == "probability" else answers

    return read


def readers(model: ModelSpec, static: StaticModel, onnx_path: str | Path) -> dict[str, Reader]:
    """{"paddle": Reader, "onnx": Reader} of one model, each reading a text as the served model reads it (its head)."""
    tokenizer = build_tokenizer(static.vocab_file, lowercase=model.do_lower_case)
    return {
        "paddle": _reader(model, offline.paddle_encoder(model, static.vocab_file), PaddlePredictor(static)),
        "onnx": _reader(
            model, lambda batch: encode_items(tokenizer, batch, model.max_seq_len), OnnxModel(str(onnx_path))
        ),
    }


def _cosines(embed: Reader, queries: list[str], corpus: list[str]) -> np.ndarray:
    return unit(embed(queries)) @ unit(embed(corpus)).T


def evaluate(
    model: ModelSpec,
    static: StaticModel,
    onnx_path: str | Path,
    split_file: str | Path,
    proposer: Artifacts | None = None,
) -> dict:
    """{"paddle": report, "onnx": report} of a split file: an embed model's recall@10 and MRR@10 over the split's
    corpus; a rerank model's MRR@10 and NDCG@10 of `proposer`'s top 20 re-ordered. A kind scored text by text is
    scored by evaluate.offline."""
    if model.kind_facts.scored_per_text:
        return offline.evaluate(model, static, onnx_path, split_file)
    queries, corpus, relevant = searches(read_split_file(split_file)[0])
    own = readers(model, static, onnx_path)
    if model.kind_facts.proposed_by is None:
        return {
            path: {**ranking_report(top_k(_cosines(read, queries, corpus), K), relevant), "corpus": len(corpus)}
            for path, read in own.items()
        }
    if proposer is None:
        raise BadOptionsError(
            f"a {model.task} model re-orders a {model.kind_facts.proposed_by} model's candidates: none was given",
            f"score it with the {model.kind_facts.proposed_by} model it ranks after (`proposer`)",
        )
    reports = {}
    for path, embed in readers(*proposer).items():
        cosines = _cosines(embed, queries, corpus)
        candidates = top_k(cosines, CANDIDATES)
        pairs = [(query, corpus[int(i)]) for query, row in zip(queries, candidates) for i in row]
        scores = own[path](pairs).reshape(candidates.shape)
        reports[path] = rerank_report(candidates, np.take_along_axis(cosines, candidates, axis=1), scores, relevant)
        reports[path]["corpus"] = len(corpus)
    return reports
