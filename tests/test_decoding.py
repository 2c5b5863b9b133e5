"""NER decoding as a per-model setting: `argmax` decodes as PaddleNLP's own pipeline does (each
token's best label, read by its ChunkEvaluator, i.e. seqeval's get_entities), `constrained` takes the best valid IOB2
sequence. Recorded by `export --ner-decoding`, overridden by `build --ner-decoding`, written into the postprocess
config, shown by `check`, named by the parity gate and scored both ways by `eval`.

The integration test serves a checkpoint made by paddlenlp itself (random weights, the `tiny` ERNIE shape, or
ERNIE_DEPLOY_DECODING_SHAPE=medium) and compares the served entities with PaddleNLP's argmax decoding of its own
forward pass. Measured: argmax equal on 26 of 26 texts (tiny and medium); constrained differs on 25 (tiny) and 6
(medium) of them."""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core.errors import BadRepositoryError, ErnieDeployError
from ernie_deploy.core.spec import REBUILD, SPEC_PARAMETER, ModelSpec, OldRecord
from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS, TOKEN_CLS
from ernie_deploy.serving.entities import (
    DECODING_PARAMETER,
    DECODINGS,
    DEFAULT_DECODING,
    batch_entities,
    constrained_label_ids,
    decode_entities,
    label_ids,
)

from .conftest import MSRA_LABELS, artifacts

LABELS = MSRA_LABELS
ID = {name: i for i, name in enumerate(LABELS)}


def _logits(rows: list[list[str]], width: int | None = None, second: dict | None = None) -> tuple:
    """Logits [B, width, C] whose argmax is each row's tags ([CLS] first, O on [CLS], [SEP] and padding), lengths [B];
    `second` {(row, token): tag} gives that token a close second best."""
    width = width or max(len(r) for r in rows) + 2
    logits = np.zeros((len(rows), width, len(LABELS)))
    logits[:, :, ID["O"]] = 1.0
    for b, row in enumerate(rows):
        for i, tag in enumerate(row, start=1):
            logits[b, i] = 0.0
            logits[b, i, ID[tag]] = 2.0
    for (b, i), tag in (second or {}).items():
        logits[b, i + 1, ID[tag]] = 1.9
    return logits, np.array([len(r) + 2 for r in rows])


def _one_char_offsets(length: int, width: int) -> np.ndarray:
    """[CLS] (0, 0), one character per token, [SEP] and padding (0, 0)."""
    offsets = np.zeros((width, 2), np.int64)
    for i in range(1, length - 1):
        offsets[i] = (i - 1, i)
    return offsets


def _ent(kind: str, start: int, end: int, text: str) -> dict:
    return {"type": kind, "start": start, "end": end, "text": text[start:end]}


# ---------------------------------------------------------------------------------------------------------------
# The decoder choice


def test_decodings_and_the_default():
    assert DECODINGS == ("constrained", "argmax") and DEFAULT_DECODING == "constrained"


def test_label_ids_argmax_is_each_tokens_best_and_constrained_is_the_best_valid_sequence():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(5, 9, len(LABELS))) * 2
    lengths = np.array([9, 6, 2, 3, 9])
    assert label_ids(logits, lengths, LABELS, "argmax").tolist() == logits.argmax(-1).tolist()
    want = constrained_label_ids(logits, lengths, LABELS).tolist()
    assert label_ids(logits, lengths, LABELS, "constrained").tolist() == want
    assert label_ids(logits, lengths, LABELS).tolist() == want  # the default


def test_an_unknown_decoding_is_refused_by_name():
    logits, lengths = _logits([["O"]])
    for call in (
        lambda: label_ids(logits, lengths, LABELS, "viterbi"),
        lambda: decode_entities("a", logits[0].argmax(-1), _one_char_offsets(3, 3), 3, LABELS, "viterbi"),
    ):
        with pytest.raises(ErnieDeployError, match="(?s)unknown NER decoding 'viterbi'.*constrained, argmax"):
            call()


def test_argmax_reads_tags_as_seqeval_does_which_is_paddlenlps_chunk_evaluator():
    """Random tag sequences, one character per token: argmax decoding gives exactly seqeval's get_entities (what
    paddlenlp.metrics.ChunkEvaluator reads), as character spans."""
    from seqeval.metrics.sequence_labeling import get_entities

    rng = random.Random(7)
    for _ in range(3000):
        tags = [rng.choice(LABELS) for _ in range(rng.randint(0, 14))]
        text = "".join(chr(0x4E00 + rng.randrange(500)) for _ in tags)
        length = len(tags) + 2
        ids = np.array([ID["O"], *(ID[t] for t in tags), ID["O"]])
        got = decode_entities(text, ids, _one_char_offsets(length, length), length, LABELS, "argmax")
        assert got == [_ent(kind, s, e + 1, text) for kind, s, e in get_entities(tags)], tags


# Argmax I-PER I-PER O I-PER I-PER: the first run has B-PER a close second on its first token (the best valid sequence
# repairs it to B-PER I-PER), the second has O a close second on both tokens (the best valid sequence drops it).
OPENING_WITH_I = ([["I-PER", "I-PER", "O", "I-PER", "I-PER"]], None, {(0, 0): "B-PER", (0, 3): "O", (0, 4): "O"})


def test_a_run_that_opens_with_i_is_an_entity_under_argmax_and_repaired_or_dropped_under_constrained():
    text = "张三说李四"
    logits, lengths = _logits(*OPENING_WITH_I)
    offsets = _one_char_offsets(7, 7)[None]
    argmax = batch_entities([text], logits, lengths, offsets, LABELS, "argmax")[0]
    constrained = batch_entities([text], logits, lengths, offsets, LABELS, "constrained")[0]
    assert argmax == [_ent("PER", 0, 2, text), _ent("PER", 3, 5, text)]  # PaddleNLP's reading
    assert constrained == [_ent("PER", 0, 2, text)]  # repaired to B-PER I-PER; the other run is not an entity
    # A change of type ends an entity and starts one under argmax; constrained picks one valid sequence.
    logits, lengths = _logits([["B-LOC", "I-ORG", "I-ORG"]])
    assert batch_entities([text[:3]], logits, lengths, offsets[:, :5], LABELS, "argmax")[0] == [
        _ent("LOC", 0, 1, text),
        _ent("ORG", 1, 3, text),
    ]


def test_argmax_ignores_specials_and_padding_like_constrained():
    text = "北京"
    logits, lengths = _logits([["B-LOC", "I-LOC"]], width=6)
    logits[0, 0, ID["I-LOC"]] = 9.0  # [CLS] continues into the entity: no characters, nothing changes
    logits[0, 3:, ID["B-PER"]] = 9.0  # [SEP] and padding
    for decoding in DECODINGS:
        got = batch_entities([text], logits, lengths, _one_char_offsets(4, 6)[None], LABELS, decoding)
        assert got == [[_ent("LOC", 0, 2, text)]], decoding


# ---------------------------------------------------------------------------------------------------------------
# The postprocess step reads its decoding from its config


def _post(tmp_path: Path, decoding: str | None, windowed: bool = False):
    from ernie_deploy.kinds.token.serving import TokenClsPostprocess

    (tmp_path / "labels.json").write_text(json.dumps(LABELS))
    params = {} if decoding is None else {DECODING_PARAMETER: {"string_value": decoding}}
    if windowed:
        params["long_text"] = {"string_value": "window"}
    return TokenClsPostprocess({"parameters": params}, tmp_path)


def _post_inputs(text: str, logits: np.ndarray, windowed: bool) -> dict:
    length = logits.shape[1]
    offsets = _one_char_offsets(length, length)[None]
    texts = np.array([[text.encode()]], dtype=np.object_)
    if not windowed:
        return {"logits": logits, "text": texts, "offsets": offsets, "lengths": np.array([[length]])}
    return {
        "logits": logits[:, None],  # one window holds the whole text
        "text": texts,
        "window_starts": np.array([[0]]),
        "window_ends": np.array([[length - 2]]),
        "text_offsets": offsets,
        "text_lengths": np.array([[length]]),
    }


@pytest.mark.parametrize("windowed", [False, True], ids=["plain", "windowed"])
def test_postprocess_decodes_as_its_config_says_on_both_paths(tmp_path, windowed):
    from ernie_deploy.serving.entities import entities_from_json
    from ernie_deploy.serving.entity_scores import without_scores

    text = "张三说李四"
    logits, _ = _logits(*OPENING_WITH_I)
    got = {}
    for decoding in (None, *DECODINGS):
        post = _post(tmp_path, decoding, windowed)
        assert post.decoding == (decoding or DEFAULT_DECODING)
        # The spans (their scores are tests/test_entity_scores.py's)
        got[decoding] = without_scores(entities_from_json(post(_post_inputs(text, logits, windowed))["entities"][0, 0]))
    assert got["argmax"] == [_ent("PER", 0, 2, text), _ent("PER", 3, 5, text)]
    assert got["constrained"] == got[None] == [_ent("PER", 0, 2, text)]  # no parameter: the default


def test_postprocess_refuses_an_unknown_decoding_at_load(tmp_path):
    with pytest.raises(BadRepositoryError, match=f"(?s)parameter '{DECODING_PARAMETER}' is 'greedy'.*argmax"):
        _post(tmp_path, "greedy")


# ---------------------------------------------------------------------------------------------------------------
# Where it is recorded: the model record (model.json), build options, the postprocess config, `check`


def test_build_options_check_the_decoding_and_refuse_it_for_other_kinds():
    from ernie_deploy.repository.options import BuildOptions, check_options
    from ernie_deploy.repository.resolve import resolve_options

    def ner_decoding(model, options):
        return resolve_options(model, replace(options, runtime="python")).ner_decoding

    with pytest.raises(ErnieDeployError, match="unknown NER decoding 'best'"):
        check_options(BuildOptions(ner_decoding="best"))
    seq, token = ModelSpec.new(SEQ_CLS), ModelSpec.new(TOKEN_CLS)
    argmax = ModelSpec.new(TOKEN_CLS, ner_decoding="argmax")
    with pytest.raises(ErnieDeployError, match="'ernie_seqcls' is a sequence model") as refused:
        ner_decoding(seq, BuildOptions(ner_decoding="argmax"))
    assert "export --ner-decoding" in refused.value.fix
    assert ner_decoding(seq, BuildOptions()) is None
    assert ner_decoding(token, BuildOptions()) == "constrained"  # nothing recorded, nothing asked
    assert ner_decoding(argmax, BuildOptions()) == "argmax"  # as export recorded it
    assert ner_decoding(argmax, BuildOptions(ner_decoding="constrained")) == "constrained"  # override


def _param(config, key=DECODING_PARAMETER):
    return config.parameters[key].string_value if key in config.parameters else None


def test_the_decoding_is_a_parameter_of_the_token_postprocess_and_of_a_fused_model(tiny_token_pipeline, tiny_pipeline):
    from dataclasses import replace

    from ernie_deploy.repository.layouts import task_configs
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.repository.resolve import resolve_options

    onnx = tiny_token_pipeline.onnx
    token = replace(tiny_token_pipeline.static.spec, ner_decoding=None)
    argmax = replace(token, ner_decoding="argmax")
    post = task_configs(resolve_options(token, BuildOptions(runtime="python", layout="ensemble")), onnx)[2]
    assert post.name == token.postprocess_step and _param(post) == "constrained"
    assert (
        _param(task_configs(resolve_options(argmax, BuildOptions(runtime="python", layout="ensemble")), onnx)[2])
        == "argmax"
    )
    head = task_configs(
        resolve_options(
            token, BuildOptions(runtime="python", layout="ensemble", long_text="head", ner_decoding="argmax")
        ),
        onnx,
    )
    assert _param(head[2]) == "argmax" and _param(head[2], "long_text") is None
    (fused,) = task_configs(resolve_options(argmax, BuildOptions(runtime="python", layout="fused")), onnx)
    assert _param(fused) == "argmax"
    # A classifier has no entities: no parameter, and an explicit decoding is refused.
    seq = tiny_pipeline.static.spec
    assert all(
        _param(c) is None
        for c in task_configs(
            resolve_options(seq, BuildOptions(runtime="python", layout="ensemble")), tiny_pipeline.onnx
        )
    )
    with pytest.raises(ErnieDeployError, match="is a sequence model"):
        task_configs(
            resolve_options(seq, BuildOptions(runtime="python", layout="ensemble", ner_decoding="argmax")),
            tiny_pipeline.onnx,
        )


def test_the_record_holds_the_decoding_of_token_models_only(tiny_token_pipeline, tmp_path):
    import shutil
    from dataclasses import replace

    from ernie_deploy.core.spec import ModelSpec
    from ernie_deploy.export.static import StaticModel, export

    assert tiny_token_pipeline.static.ner_decoding == "constrained"  # recorded by export, the default
    copy = tmp_path / "static"
    shutil.copytree(tiny_token_pipeline.static.root, copy)
    replace(ModelSpec.read(copy), ner_decoding="argmax").write(copy)
    assert StaticModel.load(copy).ner_decoding == "argmax"
    # An export made before model.json kept its facts in export.json: refused by name, with the command that
    # writes its record, never read as the default decoding; so is a record of an earlier format.
    spec = ModelSpec.read(copy)
    (copy / "model.json").write_text(json.dumps({**spec.to_dict(), "format": 1}))
    with pytest.raises(OldRecord, match="record format 1") as caught:
        StaticModel.load(copy)
    assert REBUILD in caught.value.fix
    (copy / "model.json").unlink()
    with pytest.raises(BadRepositoryError, match="holds no model.json") as caught:
        StaticModel.load(copy)
    assert "ernie-deploy export" in caught.value.fix
    with pytest.raises(ErnieDeployError, match="seq_cls is a sequence task"):
        export(None, SEQ_CLS, tmp_path / "never", ner_decoding="argmax")  # refused before anything is read
    with pytest.raises(ErnieDeployError, match="unknown NER decoding"):
        export(None, TOKEN_CLS, tmp_path / "never", ner_decoding="greedy")


def test_build_writes_the_recorded_decoding_and_check_shows_it(tiny_token_pipeline, tiny_pipeline, tmp_path, capsys):
    from ernie_deploy.cli import main
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.check import check_repository, ner_decodings
    from ernie_deploy.repository.configs import parse, render
    from ernie_deploy.repository.options import BuildOptions

    p = tiny_token_pipeline
    repo = tmp_path / "models"
    build(
        artifacts(p, "people", ner_decoding="argmax"),
        repo,
        BuildOptions(runtime="python", layout="ensemble", long_text="head"),
    )
    build(artifacts(p, "other"), repo, BuildOptions(runtime="python", layout="ensemble"))
    build(artifacts(tiny_pipeline, "news"), repo, BuildOptions(runtime="python", layout="ensemble"))
    assert ner_decodings(repo) == {"people": "argmax", "other": "constrained"}
    assert check_repository(repo) == []
    assert main(["check", "-r", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "people: NER decoding argmax" in out and "other: NER decoding constrained" in out
    # A value the postprocess does not know is a problem `check` names (the step would not load).
    path = repo / "people_postprocess" / "config.pbtxt"
    config = parse(path.read_text())
    config.parameters[DECODING_PARAMETER].string_value = "greedy"
    path.write_text(render(config))
    problems = check_repository(repo)
    assert [(problem.model, "'greedy'" in problem.message) for problem in problems] == [("people_postprocess", True)]
    # A repository built before the setting was recorded carries no record on its entry: `check` names it with the
    # command that rebuilds it, and the decoding is not guessed.
    entry = repo / "people" / "config.pbtxt"
    config = parse(entry.read_text())
    del config.parameters[SPEC_PARAMETER]
    entry.write_text(render(config))
    problems = check_repository(repo)
    assert [(problem.model, "'greedy'" in problem.message) for problem in problems] == [
        ("people", False),
        ("people_postprocess", True),
    ]
    assert REBUILD in problems[0].fix
    with pytest.raises(OldRecord, match="older ernie-deploy") as caught:
        ner_decodings(repo)
    assert REBUILD in caught.value.fix


def test_the_build_flag_is_refused_for_a_classifier_in_the_same_build(tiny_pipeline, tmp_path, capsys):
    from ernie_deploy.cli import main

    argv = ["build", "--static", str(tiny_pipeline.static.root), "--onnx", str(tiny_pipeline.onnx)]
    argv += ["--repository", str(tmp_path / "models"), "--runtime", "python", "--ner-decoding", "argmax"]
    assert main(argv) == 2
    assert "is a sequence model" in capsys.readouterr().err
    assert not (tmp_path / "models" / DEMO_MODELS[SEQ_CLS.name]).exists()


def test_a_deployment_file_sets_the_decoding_per_model_through_export(tmp_path):
    from ernie_deploy.pipeline.deploy import plan

    (tmp_path / "deploy.yaml").write_text(
        "models:\n"
        "  - {name: people, task: token_cls, source: bootstrap, export: {ner_decoding: argmax}}\n"
        "  - {name: places, task: token_cls, source: bootstrap}\n"
    )
    people, places = plan(tmp_path / "deploy.yaml").models
    assert people.export.ner_decoding == "argmax" and places.export.ner_decoding is None
    (tmp_path / "bad.yaml").write_text(
        "models:\n  - {name: people, task: token_cls, source: bootstrap, export: {ner_decoding: greedy}}\n"
    )
    with pytest.raises(ErnieDeployError, match="'greedy' is not one of constrained, argmax"):
        plan(tmp_path / "bad.yaml")


# ---------------------------------------------------------------------------------------------------------------
# A checkpoint made by paddlenlp itself, served: argmax gives PaddleNLP's entities

# Texts of names, places and organisations (what a MSRA model tags), some Latin and digits; all shorter than
# max_seq_len, so PaddleNLP's truncating pipeline reads each whole, as the windowed and the head models do.
TEXTS = [
    "国务院总理李克强在北京会见了来访的德国总理默克尔",
    "上海证券交易所今日发布公告",
    "张三和李四去了广州市天河区",
    "中国人民银行宣布下调存款准备金率",
    "新华社记者王小明报道",
    "联合国安理会在纽约召开紧急会议",
    "华为公司在深圳发布新款手机",
    "北京大学与清华大学联合举办论坛",
    "刘翔在110米栏比赛中夺冠",
    "长江三峡水利枢纽工程全面竣工",
    "欧洲央行行长在法兰克福表示",
    "浙江省杭州市西湖区人民法院审理此案",
    "记者从国家统计局获悉",
    "马云创办的阿里巴巴集团在美国上市",
    "姚明代表中国队出战NBA全明星赛",
    "香港特别行政区政府今天宣布",
    "日本东京举行了盛大的庆祝活动",
    "李白和杜甫是唐代著名诗人",
    "中国科学院院士袁隆平在长沙逝世",
    "世界卫生组织总干事谭德塞发表讲话",
    "南京市鼓楼区教育局通知",
    "苹果公司CEO库克访问上海",
    "红十字会向四川灾区捐款",
    "黄河流经青海甘肃宁夏等省区",
    "故宫博物院举办2024年新春展览",
    "奥运冠军邓亚萍出席活动",
]


# The ERNIE shape of the paddlenlp-made checkpoint (ernie_deploy.fetch.shapes): tiny for speed; e.g. "medium" for the
# ERNIE 3.0 medium shape of issue 23.
SHAPE = os.environ.get("ERNIE_DEPLOY_DECODING_SHAPE", "tiny")


def _vocab() -> list[str]:
    chars = sorted({c for text in TEXTS for c in text.lower() if not c.isspace()})
    latin = list("abcdefghijklmnopqrstuvwxyz0123456789")
    specials = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
    return list(dict.fromkeys([*specials, *chars, *latin, *(f"##{c}" for c in latin)]))


def paddlenlp_argmax(checkpoint: Path, texts: list[str], max_seq_len: int = 128) -> tuple[list, list, list]:
    """PaddleNLP's own pipeline on its own checkpoint: its ErnieTokenizer, the dygraph ErnieForTokenClassification,
    the argmax, and its ChunkEvaluator's reading of the tags (seqeval's get_entities over `[CLS] tokens [SEP]`), each
    token span mapped to characters with the tokenizer's offsets ([CLS] and [SEP] hold none).
    Returns (entities per text, (logits, offsets) per text, tags per text)."""
    import paddle
    from paddlenlp.transformers import ErnieForTokenClassification, ErnieTokenizer
    from seqeval.metrics.sequence_labeling import get_entities

    model = ErnieForTokenClassification.from_pretrained(str(checkpoint))
    model.eval()
    tokenizer = ErnieTokenizer.from_pretrained(str(checkpoint))
    entities, outputs, all_tags = [], [], []
    for text in texts:
        enc = tokenizer(text, max_length=max_seq_len, truncation=True, return_offsets_mapping=True)
        with paddle.no_grad():
            ids = paddle.to_tensor([enc["input_ids"]])
            logits = model(ids, token_type_ids=paddle.to_tensor([enc["token_type_ids"]])).numpy()[0]
        tags = [LABELS[i] for i in logits.argmax(-1)]
        offsets, found, last = enc["offset_mapping"], [], len(tags) - 2
        for kind, first, end in get_entities(tags):  # end inclusive
            first, end = max(first, 1), min(end, last)
            if first <= end:
                start, stop = offsets[first][0], offsets[end][1]
                found.append({"type": kind, "start": start, "end": stop, "text": text[start:stop]})
        entities.append(found)
        outputs.append((logits, np.array(offsets)))
        all_tags.append(tags)
    return entities, outputs, all_tags


@pytest.mark.integration
def test_served_argmax_entities_equal_paddlenlps_on_its_own_checkpoint(tmp_path, capsys):
    from ernie_deploy.cli import main
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.fetch.shapes import get_shape, make_checkpoint
    from ernie_deploy.server.process import TritonServer
    from ernie_deploy.serving.entities import entities_to_char_bio
    from ernie_deploy.serving.entity_scores import without_scores

    checkpoint = make_checkpoint(get_shape(SHAPE), TOKEN_CLS, LABELS, _vocab(), tmp_path / "checkpoint")
    reference, outputs, tags = paddlenlp_argmax(checkpoint, TEXTS)
    # The comparison means something: entities were found, and some open with I- (a strict reading drops those).
    assert sum(map(len, reference)) >= len(TEXTS)
    assert any(row[s].startswith("I-") for row in tags for _, s, _ in _seqeval(row) if 0 < s < len(row) - 1)

    # Gold for `eval`: PaddleNLP's own answers, per character.
    data = tmp_path / "paddlenlp.jsonl"
    rows = [{"text": t, "labels": entities_to_char_bio(e, len(t))} for t, e in zip(TEXTS, reference)]
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")

    static, onnx, repo = tmp_path / "static", tmp_path / "onnx" / "model.onnx", tmp_path / "models"
    exported = ["export", "--task", "token_cls", "--checkpoint", str(checkpoint), "--out", str(static)]
    assert main([*exported, "--ner-decoding", "argmax"]) == 0
    assert "NER decoding argmax" in capsys.readouterr().out
    assert json.loads((static / "model.json").read_text())["ner_decoding"] == "argmax"
    assert main(["convert", "--static", str(static), "--out", str(onnx), "--parity-data", str(data)]) == 0
    parity = json.loads((onnx.parent / "parity.json").read_text())
    assert parity["ner_decoding"] == "argmax" and parity["ok"]
    assert parity["entities_agree"] == {"constrained": 1.0, "argmax": 1.0}
    assert "entities agree: constrained 100.00%, argmax (served) 100.00%" in capsys.readouterr().out

    # `eval` scores both decodings; argmax reproduces PaddleNLP's answers exactly.
    report = tmp_path / "eval.json"
    evaluated = ["eval", "--static", str(static), "--onnx", str(onnx), "--data", str(data)]
    assert main([*evaluated, "--report", str(report)]) == 0
    scores = json.loads(report.read_text())
    assert scores["ner_decoding"] == "argmax" and scores["paddle"] == scores["decodings"]["argmax"]["paddle"]
    for source in ("paddle", "onnx"):
        assert scores["decodings"]["argmax"][source]["f1"] == 1.0
        assert scores["decodings"]["constrained"][source]["f1"] < 1.0
    printed = capsys.readouterr().out
    assert "argmax *" in printed and "constrained" in printed

    # Served: argmax as export recorded it (windowed, the default for NER, and cut at the head), and constrained
    # by the build flag over the recorded choice.
    base = ["build", "--static", str(static), "--onnx", str(onnx), "--repository", str(repo), "--runtime", "python"]
    assert main([*base, "--model", "people"]) == 0
    assert main([*base, "--model", "people_head", "--long-text", "head"]) == 0
    assert main([*base, "--model", "people_constrained", "--ner-decoding", "constrained"]) == 0
    capsys.readouterr()
    assert main(["check", "-r", str(repo)]) == 0
    printed = capsys.readouterr().out
    for name, decoding in (("people", "argmax"), ("people_head", "argmax"), ("people_constrained", "constrained")):
        assert f"{name}: NER decoding {decoding}" in printed

    constrained = [
        batch_entities([text], logits[None], np.array([len(logits)]), offsets[None], LABELS, "constrained")[0]
        for text, (logits, offsets) in zip(TEXTS, outputs)
    ]
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:
        served = {}
        for name in ("people", "people_head", "people_constrained"):
            with Client(TOKEN_CLS, server.grpc_url, model=name) as client:
                # The spans, against PaddleNLP's (which has no scores); scores: tests/test_entity_scores.py
                served[name] = without_scores(client.predict(TEXTS, progress=False))
    assert served["people"] == reference
    assert served["people_head"] == reference
    assert served["people_constrained"] == constrained
    # Constrained decoding moves away from PaddleNLP's answers on some texts: counted, not assumed.
    differ = sum(a != b for a, b in zip(served["people_constrained"], reference))
    assert differ == sum(a != b for a, b in zip(constrained, reference)) and differ > 0
    print(f"{SHAPE}: constrained differs from PaddleNLP's argmax on {differ} of {len(TEXTS)} texts; argmax on 0")


def _seqeval(tags: list[str]) -> list:
    from seqeval.metrics.sequence_labeling import get_entities

    return get_entities(tags)


def test_a_version_keeps_its_models_decoding_and_one_built_before_it_was_recorded_is_refused(
    tiny_token_pipeline, tmp_path
):
    from ernie_deploy.repository.add_version import build_version
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.configs import parse, render
    from ernie_deploy.repository.options import BuildOptions

    repo, options = tmp_path / "models", BuildOptions(runtime="python", layout="ensemble", long_text="head")
    entry = artifacts(tiny_token_pipeline, "people")
    build(entry, repo, options)
    with pytest.raises(ErnieDeployError, match="does not fit people_postprocess's config"):
        build_version(
            entry,
            repo,
            BuildOptions(runtime="python", layout="ensemble", long_text="head", ner_decoding="argmax"),
            version=3,
        )
    # A model `build` wrote before its decoding was recorded carries no record on its entry: a version of it is
    # refused with the command that rebuilds it, and nothing is written.
    path = repo / "people" / "config.pbtxt"
    config = parse(path.read_text())
    del config.parameters[SPEC_PARAMETER]
    path.write_text(render(config))
    with pytest.raises(OldRecord, match="older ernie-deploy") as caught:
        build_version(entry, repo, options, version=2)
    assert REBUILD in caught.value.fix
    assert not list(repo.glob("*/2"))
