"""Multi-label classification through every stage: entity-type sets from MSRA, per-label thresholds chosen on the
dev split and stored with the model, the postprocess step, the scores, and (integration) the bootstrap model on a
real tritonserver: served micro F1 == Paddle micro F1."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ernie_deploy.core.errors import BadRequest, ErnieDeployError
from ernie_deploy.core.tasks import MULTI_LABEL
from ernie_deploy.export.gates import within

from .conftest import PARITY_TEXTS, ROOT, make_tiny_checkpoint, run_stages, shipped_scores, tokenizer_step

LABELS = ["LOC", "ORG", "PER"]


# --- thresholds -------------------------------------------------------------------------------------------------


def _f1(scores, gold, threshold) -> float:
    from sklearn.metrics import f1_score

    return f1_score(gold, scores >= threshold, zero_division=0)


@pytest.mark.parametrize("seed", range(6))
def test_chosen_threshold_is_as_good_as_any_by_brute_force(seed):
    from ernie_deploy.export.thresholds import choose_threshold

    rng = np.random.default_rng(seed)
    gold = rng.random(300) < 0.3
    # Scores that separate the classes only partly, with ties (rounded), as a weak model's do.
    scores = np.round(np.clip(rng.normal(0.35 + 0.3 * gold, 0.2), 0, 1), 2)
    chosen = choose_threshold(scores, gold)
    best = _f1(scores, gold, chosen)
    grid = np.linspace(0, 1.0001, 2001)
    brute = max(_f1(scores, gold, t) for t in grid)
    assert best == pytest.approx(brute, abs=1e-12)
    # Ties: 0.5 when it is among the best; else the best interval between neighbouring dev scores whose midpoint
    # (the robust representative of the interval) is nearest 0.5.
    if _f1(scores, gold, 0.5) == pytest.approx(brute, abs=1e-12):
        assert chosen == 0.5
    distinct = np.unique(scores)
    for t in grid:
        if _f1(scores, gold, t) >= best - 1e-12 and t <= distinct[-1]:
            lower, upper = distinct[distinct < t], distinct[distinct >= t][0]
            midpoint = (lower[-1] + upper) / 2 if len(lower) else upper / 2
            assert abs(chosen - 0.5) <= abs(midpoint - 0.5) + 1e-12 or _f1(scores, gold, 0.5) >= best - 1e-12
    assert chosen not in set(scores.tolist()), "a threshold between scores, not on one"


def test_threshold_ties_and_labels_without_positives():
    from ernie_deploy.export.thresholds import choose_threshold, choose_thresholds

    # Perfectly separated at any threshold in (0.2, 0.9]: 0.5 is among the best, so 0.5 it is.
    assert choose_threshold(np.array([0.1, 0.2, 0.9, 0.95]), np.array([0, 0, 1, 1])) == 0.5
    # Separated only in (0.6, 0.7]: the midpoint 0.65.
    assert choose_threshold(np.array([0.1, 0.6, 0.7, 0.95]), np.array([0, 0, 1, 1])) == pytest.approx(0.65)
    assert choose_threshold(np.array([0.1, 0.9]), np.array([0, 0])) == 0.5
    logits = np.array([[3.0, -3.0, 0.0], [-3.0, 3.0, 0.0]])
    assert choose_thresholds(logits, [["LOC"], ["ORG"]], LABELS) == {"LOC": 0.5, "ORG": 0.5, "PER": 0.5}
    with pytest.raises(ErnieDeployError, match=r"labels \['MISC'\] the model does not know"):
        choose_thresholds(logits, [["MISC"], []], LABELS)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"LOC": 0.5, "ORG": 0.5}, "does not match the model's labels: it lacks PER"),
        ({"LOC": 0.5, "ORG": 0.5, "PER": 0.5, "MISC": 0.5}, "names unknown MISC"),
        ({"LOC": 0.5, "ORG": 1.5, "PER": 0.5}, r"numbers in \[0, 1\], got ORG: 1.5"),
        ({"LOC": "high", "ORG": 0.5, "PER": -0.1}, "got LOC: 'high'; PER: -0.1"),
        ({"LOC": True, "ORG": 0.5, "PER": 0.5}, "got LOC: True"),
        ([0.5, 0.5, 0.5], "holds list, not a {label: threshold} object"),
    ],
)
def test_a_thresholds_file_that_does_not_fit_is_refused(tmp_path, content, message):
    from ernie_deploy.serving.multi_label import read_thresholds

    path = tmp_path / "thresholds.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ErnieDeployError, match=message) as refused:
        read_thresholds(path, LABELS)
    assert 'per label of labels.json, e.g. {"LOC": 0.5, "ORG": 0.5, "PER": 0.5}' in refused.value.fix


def test_thresholds_file_not_json_or_missing(tmp_path):
    from ernie_deploy.serving.multi_label import read_thresholds

    (tmp_path / "bad.json").write_text("{LOC: 0.5")
    with pytest.raises(ErnieDeployError, match="is not JSON"):
        read_thresholds(tmp_path / "bad.json", LABELS)
    with pytest.raises(ErnieDeployError, match="no thresholds file") as missing:
        read_thresholds(tmp_path / "none.json", LABELS)
    assert "ernie-deploy convert" in missing.value.fix


# --- postprocess ------------------------------------------------------------------------------------------------


def _version_dir(tmp_path, thresholds):
    (tmp_path / "labels.json").write_text(json.dumps(LABELS))
    (tmp_path / "thresholds.json").write_text(json.dumps(thresholds))
    return tmp_path


def test_postprocess_keeps_each_label_over_its_own_threshold(tmp_path):
    from ernie_deploy.serving.steps import STEPS

    step = STEPS[MULTI_LABEL.postprocess]({}, _version_dir(tmp_path, {"LOC": 0.5, "ORG": 0.9, "PER": 0.2}))
    logits = np.array([[2.0, 2.0, -1.0], [-5.0, 3.0, 0.0], [-1.0, -1.0, -2.0]], dtype=np.float32)
    out = step({"logits": logits})
    sig = 1 / (1 + np.exp(-logits.astype(np.float64)))
    np.testing.assert_allclose(out["scores"], sig, rtol=1e-6)
    assert out["scores"].dtype == np.float32 and out["labels"].shape == (3, 1)
    got = [json.loads(item) for item in out["labels"][:, 0]]
    # Text 0: LOC 0.881 >= 0.5 kept, ORG 0.881 < 0.9 dropped, PER 0.269 >= 0.2 kept; best first.
    assert [[p["label"] for p in row] for row in got] == [["LOC", "PER"], ["ORG", "PER"], []]
    assert got[0][0]["score"] == pytest.approx(sig[0, 0]) and got[1][0]["score"] == pytest.approx(sig[1, 1])


def test_postprocess_refuses_bad_logits_and_bad_threshold_files(tmp_path):
    from ernie_deploy.serving.steps import STEPS

    step_class = STEPS[MULTI_LABEL.postprocess]
    step = step_class({}, _version_dir(tmp_path, {"LOC": 0.5, "ORG": 0.5, "PER": 0.5}))
    results = step.run_requests([{"logits": np.zeros((1, 2), np.float32)}, {"logits": np.zeros((2, 3), np.float32)}])
    assert isinstance(results[0], BadRequest) and "expected [batch, 3]" in str(results[0])
    assert results[1]["labels"].shape == (2, 1), "the good request of the batch is answered"
    _version_dir(tmp_path, {"LOC": 0.5, "ORG": 0.5})
    with pytest.raises(ErnieDeployError, match="does not match the model's labels: it lacks PER"):
        step_class({}, tmp_path)


# --- scores -----------------------------------------------------------------------------------------------------


def test_micro_and_macro_f1_match_a_hand_count():
    from ernie_deploy.evaluate.metrics import format_report, score

    gold = [["LOC"], ["LOC", "PER"], [], ["ORG"]]
    predicted = [
        [{"label": "LOC", "score": 0.9}],
        [{"label": "LOC", "score": 0.8}],
        [{"label": "PER", "score": 0.6}],
        [],
    ]
    report = score(MULTI_LABEL, ["a", "b", "c", "d"], gold, predicted, LABELS)
    # LOC: tp 2, fp 0, fn 0 -> F1 1. ORG: tp 0, fn 1 -> 0. PER: tp 0, fp 1, fn 1 -> 0.
    # Micro: tp 2, fp 1, fn 2 -> P 2/3, R 1/2, F1 4/7.
    assert report["micro_f1"] == pytest.approx(4 / 7)
    assert (report["micro_precision"], report["micro_recall"]) == pytest.approx((2 / 3, 1 / 2))
    assert report["macro_f1"] == pytest.approx(1 / 3)
    assert report["per_label"]["LOC"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}
    assert report["per_label"]["PER"]["support"] == 1 and report["n"] == 4
    table = format_report(report)
    assert "micro" in table and "0.5714" in table and "PER" in table


# --- data -------------------------------------------------------------------------------------------------------


def test_entity_type_sets_come_from_the_real_msra_sentences(msra_ner, msra_multilabel):
    from ernie_deploy.fetch.data import read_split
    from ernie_deploy.fetch.datasets import entity_types

    for split in ("dev", "test"):
        texts, tags = read_split(msra_ner, split, "jsonl")
        ml_texts, label_sets = read_split(msra_multilabel, split, MULTI_LABEL.split_format)
        assert ml_texts == texts
        assert label_sets == [entity_types(t) for t in tags]
        assert any(not s for s in label_sets) and any(len(s) == 3 for s in label_sets)
    # A sentence read by hand: its BIO tags hold a PER and a LOC entity, and no ORG.
    tags = ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O"]
    assert entity_types(tags) == ["LOC", "PER"] and entity_types(["O", "O"]) == []
    texts, label_sets = read_split(msra_multilabel, "test", MULTI_LABEL.split_format)
    i = next(i for i, s in enumerate(label_sets) if s == ["LOC", "ORG", "PER"])
    ner_tags = read_split(msra_ner, "test", "jsonl")[1][i]
    assert {t[2:] for t in ner_tags if t != "O"} == {"LOC", "ORG", "PER"}


def test_label_set_files_round_trip_and_refuse_unstorable_names(tmp_path):
    from ernie_deploy.fetch.data import read_split_file, write_label_sets

    path = tmp_path / "dev.labels.tsv"
    write_label_sets(path, [(["PER", "LOC"], "李鹏在北京"), ([], "今天\t天气好")])
    assert read_split_file(path) == (["李鹏在北京", "今天\t天气好"], [["LOC", "PER"], []])
    with pytest.raises(ErnieDeployError, match="cannot be stored"):
        write_label_sets(path, [(["A|B"], "x")])


# --- the stages on a tiny model ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_multi_label(tmp_path_factory):
    """A random tiny multi-label model exported, converted with thresholds chosen on a small dev file."""
    from ernie_deploy.export.gates import Gates
    from ernie_deploy.export.onnx import convert_checked
    from ernie_deploy.fetch.data import write_label_sets

    work = tmp_path_factory.mktemp("tiny_multi_label")
    pipeline = run_stages(MULTI_LABEL, make_tiny_checkpoint(work / "ckpt", LABELS, task=MULTI_LABEL), work)
    dev = work / "dev.labels.tsv"
    write_label_sets(
        dev, [(["LOC"], "中国"), (["ORG", "PER"], "国足公布世预赛名单"), ([], "股市大涨"), (["PER"], "abc")]
    )
    onnx = convert_checked(
        pipeline.static,
        work / "checked" / "model.onnx",
        gates=Gates(tuple(PARITY_TEXTS)),
        thresholds_dev=dev,
        log=lambda _: None,
    )
    return pipeline, onnx


def test_convert_writes_thresholds_beside_the_model(tiny_multi_label):
    from ernie_deploy.serving.multi_label import read_thresholds

    pipeline, onnx = tiny_multi_label
    thresholds = read_thresholds(onnx.parent / "thresholds.json", LABELS)
    assert set(thresholds) == set(LABELS) and all(0 <= t <= 1 for t in thresholds.values())
    assert (onnx.parent / "parity.json").exists()


def test_convert_whose_dev_split_does_not_fit_keeps_the_previous_model_and_thresholds(tiny_multi_label, tmp_path):
    from ernie_deploy.export.gates import Gates
    from ernie_deploy.export.onnx import convert_checked
    from ernie_deploy.fetch.data import write_label_sets

    pipeline, onnx = tiny_multi_label
    before = {name: (onnx.parent / name).read_bytes() for name in ("model.onnx", "thresholds.json", "parity.json")}
    dev = tmp_path / "dev.labels.tsv"
    write_label_sets(dev, [(["MISC"], "中国")])
    with pytest.raises(ErnieDeployError, match=r"labels \['MISC'\] the model does not know"):
        convert_checked(pipeline.static, onnx, gates=Gates(tuple(PARITY_TEXTS)), thresholds_dev=dev, log=print)
    assert {name: (onnx.parent / name).read_bytes() for name in before} == before


def test_build_serves_thresholds_and_refuses_a_file_that_does_not_fit(tiny_multi_label, tmp_path, capsys):
    from ernie_deploy.cli import main
    from ernie_deploy.serving.limits import ReadingLimits
    from ernie_deploy.serving.model_steps import OnnxStep
    from ernie_deploy.serving.pipeline import PipelineStep
    from ernie_deploy.serving.steps import STEPS

    pipeline, onnx = tiny_multi_label
    repo = tmp_path / "models"
    base = ["build", "--static", str(pipeline.static.root), "--onnx", str(onnx), "--repository", str(repo)]
    assert main([*base, "--runtime", "python", "--layout", "ensemble"]) == 0
    post_dir = repo / "ernie_multilabel_postprocess" / "1"
    assert json.loads((post_dir / "thresholds.json").read_text()) == json.loads(
        (onnx.parent / "thresholds.json").read_text()
    )
    # --thresholds overrides; a file naming other labels is refused and the repository stays as it was.
    override = tmp_path / "mine.json"
    override.write_text(json.dumps({"LOC": 0.3, "ORG": 0.7, "PER": 0.5}))
    assert main([*base, "--runtime", "python", "--layout", "ensemble", "--thresholds", str(override)]) == 0
    assert json.loads((post_dir / "thresholds.json").read_text()) == {"LOC": 0.3, "ORG": 0.7, "PER": 0.5}
    capsys.readouterr()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"LOC": 0.3, "MISC": 0.7, "PER": 0.5}))
    assert main([*base, "--runtime", "python", "--layout", "ensemble", "--thresholds", str(bad)]) != 0
    err = capsys.readouterr().err
    assert "does not match the model's labels: it lacks ORG and names unknown MISC" in err and "Traceback" not in err
    assert json.loads((post_dir / "thresholds.json").read_text())["ORG"] == 0.7
    # `ernie-deploy check` finds a thresholds file edited after the build, as the step would refuse it.
    from ernie_deploy.repository.check import check_repository

    assert check_repository(repo) == []
    (post_dir / "thresholds.json").write_text(json.dumps({"LOC": 0.3, "ORG": 2, "PER": 0.5}))
    problems = [str(p) for p in check_repository(repo)]
    assert len(problems) == 1 and r"thresholds must be numbers in [0, 1], got ORG: 2" in problems[0], problems
    (post_dir / "thresholds.json").write_text(json.dumps({"LOC": 0.3, "ORG": 0.7, "PER": 0.5}))
    # The same texts through the three steps and through the fused pipeline: the same labels and scores.
    texts = np.array([t.encode() for t in PARITY_TEXTS], dtype=np.object_).reshape(-1, 1)
    tok = tokenizer_step({"parameters": {"max_seq_len": {"string_value": "128"}}}, repo / "ernie_tokenizer" / "1")
    ids = tok({"text": texts})
    logits = OnnxStep({}, repo / "ernie_multilabel_model" / "1")(ids)["logits"]
    out = STEPS[MULTI_LABEL.postprocess]({}, post_dir)({"logits": logits})
    fused_repo = tmp_path / "fused"
    assert (
        main([*base, "--runtime", "python", "--fused", "--repository", str(fused_repo), "--thresholds", str(override)])
        == 0
    )
    config = {
        "parameters": {
            "postprocess": {"string_value": MULTI_LABEL.postprocess},
            **{key: {"string_value": str(value)} for key, value in ReadingLimits().parameters().items()},
        },
        "output": [{"name": "labels"}, {"name": "scores"}],
    }
    fused = PipelineStep(config, fused_repo / "ernie_multilabel" / "1")({"text": texts})
    assert fused["labels"].tolist() == out["labels"].tolist()
    np.testing.assert_allclose(fused["scores"], out["scores"], atol=1e-6)


def test_thresholds_flag_needs_exactly_one_multi_label_model(tiny_pipeline, tmp_path, capsys):
    from ernie_deploy.cli import main

    args = ["build", "--static", str(tiny_pipeline.static.root), "--onnx", str(tiny_pipeline.onnx)]
    assert main([*args, "--repository", str(tmp_path / "m"), "--thresholds", str(tmp_path / "t.json")]) != 0
    assert "replaces one multi-label model's thresholds" in capsys.readouterr().err


# --- integration: the bootstrap model on a real tritonserver ----------------------------------------------------


@pytest.fixture(scope="module")
def multi_label_server(every_kind_server):
    """The multi-label model served beside every other kind (tests/conftest.py)."""
    return every_kind_server


@pytest.mark.integration
def test_served_micro_f1_equals_paddle_and_beats_baseline(multi_label_pipeline, multi_label_server, tmp_path):
    from ernie_deploy.evaluate.offline import evaluate
    from ernie_deploy.fetch.data import split_file

    p = multi_label_pipeline
    test = split_file(p.data, "test", MULTI_LABEL.split_format)
    offline = evaluate(p.static.spec, p.static, p.onnx, test)  # the thresholds: those convert wrote beside p.onnx
    report = tmp_path / "served.json"
    client = ROOT / "clients" / "multi_label_grpc_client.py"
    argv = [sys.executable, str(client), "--grpc-url", multi_label_server.grpc_url, "--data", str(test)]
    result = subprocess.run([*argv, "--report", str(report)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("micro_f1: ") and last.endswith("(n=5000)"), last
    served = json.loads(report.read_text())
    print(json.dumps({"paddle": offline["paddle"], "onnx": offline["onnx"], "served": served}, indent=1))
    # Micro F1 is no fraction of the texts: a tenth of a point, sparing float rounding (gates.SCORE_ROUNDING).
    assert within(offline["onnx"]["micro_f1"], offline["paddle"]["micro_f1"], 0.001), offline
    assert within(served["micro_f1"], offline["paddle"]["micro_f1"], 0.001), (served, offline["paddle"])
    assert served["per_label"] == offline["onnx"]["per_label"], "served decides exactly as offline onnxruntime"
    assert served["micro_f1"] == shipped_scores("multi_label")["test"], "the shipped model's manifest records another"


@pytest.mark.integration
def test_served_answer_for_one_text_and_bad_input(multi_label_pipeline, multi_label_server):
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.core.spec import ModelSpec
    from ernie_deploy.evaluate.offline import onnx_predictions

    p = multi_label_pipeline
    texts = ["新华社北京电，国务院总理李鹏今天在人民大会堂会见了日本客人。", "今天天气很好。"]
    with Client(MULTI_LABEL, multi_label_server.grpc_url) as client:
        client.check_ready()
        out = client.infer(texts)
        predicted = client.predict(texts, progress=False)
        with pytest.raises(ErnieDeployError, match="text 1 is empty"):
            client.infer(["李鹏", ""])
        assert client.predict(["李鹏"], progress=False), "the server still answers"
    assert out["scores"].shape == (2, 3)
    converted = ModelSpec.read(p.onnx.parent)  # the record convert completed: the thresholds it chose
    assert converted.thresholds
    assert predicted == onnx_predictions(converted, p.onnx, p.static.vocab_file, texts)
    assert {x["label"] for x in predicted[0]} >= {"PER", "LOC"}, predicted
