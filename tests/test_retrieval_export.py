"""The embed and rerank kinds' export: every checkpoint form they read, made by paddlenlp itself, converted to ONNX
and compared with what the form's own Paddle code answers (tests/retrieval_fixtures.py: RocketQA's ErnieDualEncoder
and ErnieCrossEncoder, the neural-search recipe's pooling, paddlenlp's heads); and the checkpoints and options
refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.tasks import EMBED, RERANK, SEQ_CLS
from ernie_deploy.evaluate.retrieval import ndcg, ranking_report, rerank_report, searches, top_k
from ernie_deploy.export.onnx import check_parity, convert
from ernie_deploy.export.static import export
from ernie_deploy.fetch.checkpoints import inspect_checkpoint
from ernie_deploy.serving.encoding import encode_items
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.tokenizer import build_tokenizer
from tests.retrieval_fixtures import FORMS, PARITY_TEXTS, make_checkpoint, reference

QUERIES = [q for q, _ in PARITY_TEXTS]
PASSAGES = [p for _, p in PARITY_TEXTS]
TASKS = {"embed": EMBED, "rerank": RERANK}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("forms")
    return {form: make_checkpoint(form, root / form) for form in FORMS}


def _converted(made, form: str, tmp_path, **options):
    task = TASKS[FORMS[form][0]]
    static = export(inspect_checkpoint(made[form]), task, tmp_path / "static", **options)
    return static, convert(static, tmp_path / "onnx" / "model.onnx")


def _onnx_answers(static, onnx_path, texts, pairs=None) -> np.ndarray:
    tokenizer = build_tokenizer(static.vocab_file, lowercase=static.do_lower_case)
    items = list(zip(texts, pairs)) if pairs is not None else list(texts)
    enc = encode_items(tokenizer, items, static.max_seq_len)
    return OnnxModel(onnx_path)(enc.input_ids, enc.token_type_ids)


@pytest.mark.integration
@pytest.mark.parametrize("form", [f for f, (task, _) in FORMS.items() if task == "embed"])
def test_every_embed_form_answers_as_its_own_code(made, form, tmp_path):
    static, onnx_path = _converted(made, form, tmp_path)
    ours = _onnx_answers(static, onnx_path, QUERIES + PASSAGES)
    theirs = reference(form, made[form], QUERIES + PASSAGES)
    assert ours.shape == theirs.shape == (len(QUERIES) * 2, static.spec.dim)
    assert cosines(ours, theirs).min() >= 0.99999
    assert np.abs(ours - theirs).max() <= 1e-4
    expected = {"rocketqa_tower": ("cls", False), "rocketqa_tower_plain": ("cls", False), "recipe": ("pooled", True)}
    assert (static.spec.pooling, static.spec.normalized) == expected.get(form, ("cls", False))
    if form == "recipe":  # the recipe's vectors are unit vectors from its graph
        assert np.allclose(np.linalg.norm(ours, axis=-1), 1.0, atol=1e-5)


@pytest.mark.integration
@pytest.mark.parametrize("pooling", ["cls", "pooled", "mean"])
def test_a_plain_ernie_model_is_pooled_as_asked_and_recorded(made, pooling, tmp_path):
    static, onnx_path = _converted(made, "ernie_model", tmp_path, pooling=pooling)
    # Texts of different lengths in one batch: mean pooling must leave the padding out.
    texts = ["护照", *PASSAGES]
    ours = _onnx_answers(static, onnx_path, texts)
    theirs = reference("ernie_model", made["ernie_model"], texts, pooling=pooling)
    assert cosines(ours, theirs).min() >= 0.99999
    assert np.abs(ours - theirs).max() <= 1e-4
    assert json.loads((tmp_path / "static" / "model.json").read_text())["pooling"] == pooling


@pytest.mark.integration
@pytest.mark.parametrize("form", [f for f, (task, _) in FORMS.items() if task == "rerank"])
def test_every_rerank_form_scores_as_its_own_code(made, form, tmp_path):
    static, onnx_path = _converted(made, form, tmp_path)
    logits = _onnx_answers(static, onnx_path, QUERIES, PASSAGES)
    assert logits.shape == (len(QUERIES), 1)
    ours = 1.0 / (1.0 + np.exp(-logits[:, 0]))  # the served score: the logit's sigmoid (kinds/rerank/serving.py)
    theirs = reference(form, made[form], QUERIES, PASSAGES)
    assert np.abs(ours - theirs).max() <= 1e-5
    assert list(np.argsort(-ours, kind="stable")) == list(np.argsort(-theirs, kind="stable"))
    assert static.spec.scoring == "probability"


@pytest.mark.integration
def test_the_convert_gate_reports_the_least_cosine_of_a_vector_model(made, tmp_path):
    static, onnx_path = _converted(made, "rocketqa_tower", tmp_path)
    report = check_parity(static.spec, static, onnx_path, QUERIES + PASSAGES)
    assert report.ok and report.cosine_gate == 0.99999 and report.min_cosine >= 0.99999
    assert "least cosine" in report.summary()


@pytest.mark.integration
def test_forms_and_options_a_kind_cannot_serve_are_refused_by_name(made, tmp_path):
    with pytest.raises(BadOptionsError, match="reads its vector as `cls`"):
        export(inspect_checkpoint(made["rocketqa_tower"]), EMBED, tmp_path / "a", pooling="mean")
    with pytest.raises(BadOptionsError, match="--pooling is read by embed models"):
        export(inspect_checkpoint(made["seq_cls_2"]), SEQ_CLS, tmp_path / "b", pooling="cls")
    with pytest.raises(BadOptionsError, match="--score is read by rerank models"):
        export(inspect_checkpoint(made["ernie_model"]), EMBED, tmp_path / "c", score="raw")
    with pytest.raises(BadCheckpointError, match="not a cross-encoder"):
        export(inspect_checkpoint(made["ernie_model"]), RERANK, tmp_path / "d")
    for out in "abcd":
        assert not (tmp_path / out).exists()  # refused before anything was written


def test_retrieval_metrics_count_what_they_say():
    pairs = [("q1", "a"), ("q1", "b"), ("q2", "c"), ("q3", "d")]
    queries, corpus, relevant = searches(pairs)
    assert queries == ["q1", "q2", "q3"] and corpus == ["a", "b", "c", "d"]
    assert relevant == [{0, 1}, {2}, {3}]
    # q1 finds b first then a; q2 finds c third; q3 never finds d in its top 2.
    ranked = [[1, 0], [0, 1, 2], [0, 1]]
    report = ranking_report(ranked, relevant, k=2)
    assert report["mrr_at_2"] == pytest.approx((1.0 + 0.0 + 0.0) / 3)
    assert report["recall_at_2"] == pytest.approx((1.0 + 0.0 + 0.0) / 3)
    report = ranking_report(ranked, relevant, k=3)
    assert report["mrr_at_3"] == pytest.approx((1.0 + 1 / 3 + 0.0) / 3)
    scores = np.array([[0.1, 0.9, 0.5], [0.3, 0.2, 0.1]])
    assert top_k(scores, 2).tolist() == [[1, 2], [0, 1]]
    # A perfect order of the relevant candidate scores NDCG 1; the reverse less.
    candidates = np.array([[2, 0]])
    assert ndcg(candidates, np.array([[0.9, 0.1]]), [{2}]) == pytest.approx(1.0)
    assert ndcg(candidates, np.array([[0.1, 0.9]]), [{2}]) < 1.0
    # Reranking reorders each query's candidates by score (a tie keeps the embed order) beside the embed order.
    candidates, cosines = np.array([[0, 1, 2], [3, 2, 1]]), np.array([[0.9, 0.8, 0.7], [0.9, 0.8, 0.7]])
    report = rerank_report(candidates, cosines, np.array([[0.1, 0.2, 0.9], [0.5, 0.5, 0.1]]), [{2}, {2}])
    assert report["mrr_at_10"] == pytest.approx((1.0 + 0.5) / 2) and report["embed_mrr_at_10"] == pytest.approx(
        (1 / 3 + 0.5) / 2
    )
    assert report["ndcg_at_10"] > report["embed_ndcg_at_10"] and report["candidates"] == 3


@pytest.mark.integration
def test_a_static_embedding_model_is_served_as_it_is(made, tmp_path):
    """A Paddle static model answering [batch, dim] (here the one export wrote for a RocketQA tower) is read as a
    checkpoint of its own: copied through, its dimension read from one run, its vectors unchanged."""
    first, first_onnx = _converted(made, "rocketqa_tower", tmp_path / "first")
    static = export(inspect_checkpoint(first.root), EMBED, tmp_path / "again")
    assert static.spec.dim == first.spec.dim == 48 and static.spec.pooling is None
    onnx_path = convert(static, tmp_path / "again_onnx" / "model.onnx")
    texts = QUERIES + PASSAGES
    assert np.abs(_onnx_answers(static, onnx_path, texts) - _onnx_answers(first, first_onnx, texts)).max() <= 1e-6
    with pytest.raises(BadOptionsError, match="a static model, whose graph pools its own"):
        export(inspect_checkpoint(first.root), EMBED, tmp_path / "pooled", pooling="mean")
    with pytest.raises(BadCheckpointError, match="read from its dygraph checkpoint"):
        export(inspect_checkpoint(first.root), RERANK, tmp_path / "scored")
