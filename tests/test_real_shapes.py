"""ERNIE checkpoints in their real shapes through every stage: ERNIE 3.0 nano, micro, mini, medium and base, and
ERNIE 1.0, in the configurations paddlenlp 2.8.1 ships (ERNIE_PRETRAINED_INIT_CONFIGURATION), with random weights
(model hubs are out of reach here) and a vocab.txt of the model's vocab_size, saved the ways users save them:

  a  save_pretrained: config.json, model_state.pdparams, vocab.txt, tokenizer_config.json
  b  paddle.jit.save: a Paddle 3 PIR program (inference.json + inference.pdiparams) beside the tokenizer's files
  c  the legacy format (PREFIX.pdmodel + PREFIX.pdiparams). Paddle 3.3.1 cannot write ERNIE in it: with
     FLAGS_enable_pir_api=0, both paddle.jit.save and building the model in a static program fail in the
     attention's paddle.matmul ("argument must be Value, but got Variable"), which takes PIR values only now.
     paddle.static.save_inference_model still writes a program of legacy ops (embedding, fc), so the reader is
     tested on such a program: ERNIE's two inputs, a real-shaped 40,000-token vocabulary, 10 labels.

For every size and form, fetch, export and convert pass, and onnxruntime fed by the serving tokenizer answers as
Paddle's own forward pass (the dygraph model the checkpoint was saved from) fed by paddlenlp's ErnieTokenizer.
Then a real tritonserver serves each size's save_pretrained form from a repository of its own (a repository
holds one model per task, under fixed names), nano with a token_cls head beside its classifier, and answers over
gRPC with Paddle's labels, confidences, logits and entities.

Measured here (2 cores, shared host): the whole module in 355 s, every size served. Per size, export 1.4-7.7 s and
convert 6-44 s (base); the numbers are in docs/CONVERT.md. Set ERNIE_DEPLOY_REAL_SHAPES_REPORT=FILE to get them as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, MODEL_INPUTS, SEQ_CLS, TOKEN_CLS
from ernie_deploy.serving.entity_scores import same_entities

from .conftest import MSRA_LABELS, THUCNEWS_LABELS, artifacts

SIZES = {
    "nano": "ernie-3.0-nano-zh",
    "micro": "ernie-3.0-micro-zh",
    "mini": "ernie-3.0-mini-zh",
    "medium": "ernie-3.0-medium-zh",
    "base": "ernie-3.0-base-zh",
    "ernie-1.0": "ernie-1.0",
}
SERVED = tuple(SIZES)
# Mixed case (do_lower_case), digits, a symbol, full-width punctuation, and one text past max_seq_len.
TEXTS = [
    "国足公布世预赛名单，主帅称要打出精神面貌",
    "iPhone 15 Pro发布：A17芯片，售价7999元",
    "央行宣布下调存款准备金率0.25个百分点",
    "气温-5℃～3℃，北风3级",
    "上证指数" * 50,
]
TOLERANCE = 1e-4  # convert's default gate; measured diffs are in the module's report (docs/CONVERT.md)
REPORT_ENV = "ERNIE_DEPLOY_REAL_SHAPES_REPORT"  # a JSON file to write this module's measurements to


def real_vocab(size: int) -> list[str]:
    """A vocabulary of exactly `size` tokens laid out as ERNIE's: special tokens, then ASCII and CJK characters,
    then word pieces. Synthetic, but every text above tokenizes to real ids, spread over the whole table."""
    specials = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
    ascii_ = [chr(c) for c in range(33, 127)]
    cjk = [chr(c) for c in range(0x4E00, 0x9FFF + 1)]
    used = sorted({ch for text in TEXTS for ch in text.lower() if not ch.isspace()})
    words = ["iphone", "pro", "a17", "15", "25", "7999", "0"]
    pieces = [f"##{c}" for c in ascii_ + cjk]
    vocab = list(dict.fromkeys(specials + used + words + ascii_ + cjk + pieces))
    assert len(vocab) >= size
    return vocab[:size]


@dataclass
class Made:
    """A random-weight checkpoint of one size, saved in forms a and b (b: classifiers only), and Paddle's answers
    on TEXTS."""

    size: str
    task: object
    params: int
    config: dict
    forms: dict[str, Path]
    ids: list[list[int]]  # ErnieTokenizer's ids per text
    logits: list[np.ndarray]  # the dygraph model's forward pass per text
    task_id_diff: float | None  # use_task_id: forward without task_type_ids vs with the config's task_id given


@dataclass
class Staged:
    static: object  # StaticModel
    onnx: Path
    timings: dict[str, float] = field(default_factory=dict)


def _make(root: Path, size: str, task) -> Made:
    import paddle
    from paddlenlp.transformers import ErnieTokenizer
    from paddlenlp.transformers.ernie.configuration import ERNIE_PRETRAINED_INIT_CONFIGURATION

    from ernie_deploy.fetch.shapes import random_model

    labels = THUCNEWS_LABELS if task is SEQ_CLS else MSRA_LABELS
    base = dict(ERNIE_PRETRAINED_INIT_CONFIGURATION[SIZES[size]])
    model = random_model(base, task, labels)
    config = model.config
    saved, static = root / "a", root / "b"
    saved.mkdir(parents=True)
    (saved / "vocab.txt").write_text("\n".join(real_vocab(config.vocab_size)) + "\n", encoding="utf-8")
    tokenizer = ErnieTokenizer(str(saved / "vocab.txt"))
    model.save_pretrained(str(saved))
    tokenizer.save_pretrained(str(saved))
    if task is SEQ_CLS:
        # Form b, as PaddleNLP's deployment guides export: both inputs dynamic, the tokenizer's files beside it.
        spec = [paddle.static.InputSpec([None, None], "int64", name) for name in MODEL_INPUTS]
        paddle.jit.save(paddle.jit.to_static(model, input_spec=spec, full_graph=True), str(static / "inference"))
        tokenizer.save_pretrained(str(static))
        config.save_pretrained(str(static))

    ids, logits, diff = [], [], None
    with paddle.no_grad():
        for text in TEXTS:
            row = tokenizer(text, max_length=DEFAULT_MAX_SEQ_LEN, truncation=True)["input_ids"]
            x = paddle.to_tensor([row], dtype="int64")
            ids.append(row)
            logits.append(model(x, token_type_ids=paddle.zeros_like(x))[0].numpy())
            if config.use_task_id:
                plain = model.ernie(x, token_type_ids=paddle.zeros_like(x))[0]
                given = model.ernie(x, token_type_ids=paddle.zeros_like(x), task_type_ids=paddle.zeros_like(x))[0]
                diff = max(diff or 0.0, float((plain - given).abs().max()))
    params = sum(int(np.prod(p.shape)) for p in model.parameters())
    return Made(size, task, params, base, {"a": saved, "b": static}, ids, logits, diff)


class Workshop:
    """Builds each checkpoint once and runs each (size, form, task) through fetch, export and convert once."""

    def __init__(self, root: Path):
        self.root = root
        self.made: dict[tuple, Made] = {}
        self.staged: dict[tuple, Staged] = {}
        self.report: dict[str, dict] = {}

    def checkpoint(self, size: str, task=SEQ_CLS) -> Made:
        key = (size, task.name)
        if key not in self.made:
            started = time.perf_counter()
            self.made[key] = _make(self.root / f"{size}-{task.name}", size, task)
            self.row(size, task, form="a", params=self.made[key].params, make_s=time.perf_counter() - started)
        return self.made[key]

    def row(self, size: str, task, form: str, **values) -> None:
        self.report.setdefault(f"{size} {task.name} {form}", {}).update(values)

    def stages(self, size: str, form: str, task=SEQ_CLS) -> Staged:
        key = (size, form, task.name)
        if key not in self.staged:
            self.staged[key] = run_cli_stages(self.checkpoint(size, task).forms[form], self.root / "-".join(key), task)
            self.row(size, task, form, **self.staged[key].timings)
        return self.staged[key]


def run_cli_stages(source: Path, work: Path, task) -> Staged:
    """`ernie-deploy fetch`, `export` and `convert` (parity-gated on TEXTS), as a user runs them."""
    from ernie_deploy.cli import main
    from ernie_deploy.export.static import StaticModel

    work.mkdir(parents=True)
    if task is SEQ_CLS:
        parity = work / "parity.tsv"
        parity.write_text("label\ttext\n" + "".join(f"sports\t{t}\n" for t in TEXTS), encoding="utf-8")
    else:
        parity = work / "parity.jsonl"
        parity.write_text("".join(json.dumps({"text": t, "labels": ["O"] * len(t)}) + "\n" for t in TEXTS))
    checkpoint, static, onnx = work / "checkpoint", work / "static", work / "onnx" / "model.onnx"
    timings = {}
    for stage, argv in (
        ("fetch_s", ["fetch", str(source), "--task", task.name, "--out", str(checkpoint)]),
        ("export_s", ["export", "--task", task.name, "--checkpoint", str(checkpoint), "--out", str(static)]),
        ("convert_s", ["convert", "--static", str(static), "--out", str(onnx), "--parity-data", str(parity)]),
    ):
        started = time.perf_counter()
        assert main(argv) == 0, f"ernie-deploy {' '.join(argv)} failed"
        timings[stage] = round(time.perf_counter() - started, 1)
    report = json.loads((onnx.parent / "parity.json").read_text())
    timings.update(onnx_mb=round(onnx.stat().st_size / 2**20, 1), convert_parity_max_abs_diff=report["max_abs_diff"])
    return Staged(StaticModel.load(static), onnx, timings)


@pytest.fixture(scope="module")
def workshop(tmp_path_factory):
    shop = Workshop(tmp_path_factory.mktemp("real_shapes"))
    yield shop
    if os.environ.get(REPORT_ENV):
        Path(os.environ[REPORT_ENV]).write_text(json.dumps(shop.report, indent=1))


def onnx_vs_paddle(made, staged: Staged) -> float:
    """Serving tokenizer + onnxruntime against ErnieTokenizer + Paddle's forward pass (`made.ids`, `made.logits`),
    text by text: the ids must be equal and the labels too; returns the largest logit difference."""
    from ernie_deploy.serving.encoding import encode_batch
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(staged.static.vocab_file)
    model = OnnxModel(staged.onnx)
    worst = 0.0
    for text, ids, expected in zip(TEXTS, made.ids, made.logits):
        enc = encode_batch(tokenizer, [text], staged.static.max_seq_len)
        assert enc.input_ids[0].tolist() == ids
        got = model(enc.input_ids, enc.token_type_ids)[0]
        assert got.shape == expected.shape
        assert (got.argmax(-1) == expected.argmax(-1)).all()
        worst = max(worst, float(np.abs(got - expected).max()))
    return worst


# ---------------------------------------------------------------------------------------------------------------
# Every size, forms a and b: fetch, export, convert, and ONNX answers as Paddle's forward pass


@pytest.mark.integration
@pytest.mark.parametrize("form", ["a", "b"])
@pytest.mark.parametrize("size", list(SIZES))
def test_every_size_and_form_goes_through_the_stages(workshop, size, form):
    import onnx

    made = workshop.checkpoint(size)
    config = json.loads((made.forms["a"] / "config.json").read_text())
    assert config["vocab_size"] == len((made.forms["a"] / "vocab.txt").read_text(encoding="utf-8").splitlines())
    staged = workshop.stages(size, form)
    static = staged.static
    assert static.model_file.name == "inference.json"
    assert (static.max_seq_len, static.max_positions, static.do_lower_case) == (
        128,
        made.config["max_position_embeddings"],
        True,
    )
    assert static.labels == THUCNEWS_LABELS
    # ERNIE 3.0's task embedding needs no third input: absent, paddlenlp adds the row of task_id 0.
    assert [i.name for i in onnx.load(str(staged.onnx), load_external_data=False).graph.input] == list(MODEL_INPUTS)
    if made.config.get("use_task_id"):
        assert made.task_id_diff == 0.0
    diff = onnx_vs_paddle(made, staged)
    workshop.row(size, SEQ_CLS, form, onnx_vs_paddle_forward_max_abs_diff=diff)
    assert diff <= TOLERANCE


# ---------------------------------------------------------------------------------------------------------------
# Served through a real tritonserver: labels, confidences and logits as Paddle's forward pass


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _served_logits(url: str, task, ids: list[int]) -> np.ndarray:
    """The model step's logits for one text, fed paddlenlp's ids (so only the model is compared)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        x = np.array([ids], np.int64)
        inputs = [grpcclient.InferInput(name, list(x.shape), "INT64") for name in MODEL_INPUTS]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(np.zeros_like(x))
        return client.infer(ModelSpec.new(task).model_step, inputs).as_numpy("logits")[0]
    finally:
        client.close()


@pytest.mark.integration
@pytest.mark.parametrize("size", SERVED)
def test_served_answers_as_paddle(workshop, size, tmp_path):
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.evaluate.offline import paddle_encoder, predictions
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    tasks = (SEQ_CLS, TOKEN_CLS) if size == "nano" else (SEQ_CLS,)
    staged = {task: workshop.stages(size, "a", task) for task in tasks}
    entries = [artifacts(s) for s in staged.values()]
    # Head cuts: the reference below is Paddle's forward pass over paddlenlp's (truncated) ids; windows are checked
    # against Paddle in tests/test_long_text_served.py.
    build(entries, tmp_path / "models", BuildOptions(runtime="python", layout="ensemble", long_text="head"))
    server = TritonServer(tmp_path / "models", http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "log")
    with server:
        seq = workshop.checkpoint(size, SEQ_CLS)
        with Client(SEQ_CLS, server.grpc_url) as client:
            out = client.infer(TEXTS)
        assert out["label_id"][:, 0].tolist() == [int(x.argmax()) for x in seq.logits]
        assert [x.decode() for x in out["label"][:, 0]] == [THUCNEWS_LABELS[int(x.argmax())] for x in seq.logits]
        confidence = np.abs(out["confidence"][:, 0] - [_softmax(x).max() for x in seq.logits]).max()
        logits = max(
            float(np.abs(_served_logits(server.grpc_url, SEQ_CLS, ids) - x).max())
            for ids, x in zip(seq.ids, seq.logits)
        )
        workshop.row(size, SEQ_CLS, "a", served_labels_equal=True, served_logits_max_abs_diff=logits)
        assert confidence <= TOLERANCE and logits <= TOLERANCE
        if TOKEN_CLS in tasks:
            tok = workshop.checkpoint(size, TOKEN_CLS)
            static = staged[TOKEN_CLS].static
            model = static.spec.updated(long_text="head")  # cut at the head, as this repository is built
            assert model.labels == tuple(MSRA_LABELS)
            encode = paddle_encoder(model, static.vocab_file)
            expected = [predictions(model, x[None], encode([text]), [text])[0] for text, x in zip(TEXTS, tok.logits)]
            with Client(TOKEN_CLS, server.grpc_url) as client:  # the same spans, scores within SCORE_TOLERANCE
                assert same_entities(client.predict(TEXTS, progress=False), expected)
            assert any(expected), "random weights gave no entity at all: the comparison would be empty"
            logits = max(
                float(np.abs(_served_logits(server.grpc_url, TOKEN_CLS, ids) - x).max())
                for ids, x in zip(tok.ids, tok.logits)
            )
            workshop.row(size, TOKEN_CLS, "a", served_entities_equal=True, served_logits_max_abs_diff=logits)
            assert logits <= TOLERANCE


# ---------------------------------------------------------------------------------------------------------------
# Form c: the legacy .pdmodel reader, on the program Paddle 3.3.1 can still write in that format

LEGACY_PROGRAM = """
import json, sys
import numpy as np
import paddle

folder, vocab_size, num_labels, ids_file, reference_file = sys.argv[1:]
paddle.enable_static()
paddle.seed(14)
main, start = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, start):
    ids = paddle.static.data("input_ids", [None, None], "int64")
    types = paddle.static.data("token_type_ids", [None, None], "int64")
    hidden = paddle.static.nn.embedding(ids, size=[int(vocab_size), 32])
    hidden = hidden + paddle.static.nn.embedding(types, size=[4, 32])
    pooled = paddle.static.nn.fc(paddle.mean(hidden, axis=1), 32, activation="tanh")
    logits = paddle.static.nn.fc(pooled, int(num_labels))
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(start)
paddle.static.save_inference_model(folder + "/inference", [ids, types], [logits], exe, program=main)
rows = [np.array([row], np.int64) for row in json.load(open(ids_file))]
out = [exe.run(main, feed={"input_ids": x, "token_type_ids": 0 * x}, fetch_list=[logits])[0][0].tolist() for x in rows]
json.dump(out, open(reference_file, "w"))
"""


@pytest.mark.integration
def test_legacy_pdmodel_goes_through_the_stages(tmp_path):
    from types import SimpleNamespace

    from paddlenlp.transformers import ErnieTokenizer

    folder = tmp_path / "legacy"
    folder.mkdir()
    vocab_size = 40000
    (folder / "vocab.txt").write_text("\n".join(real_vocab(vocab_size)) + "\n", encoding="utf-8")
    config = {"vocab_size": vocab_size, "max_position_embeddings": 2048, "id2label": dict(enumerate(THUCNEWS_LABELS))}
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer = ErnieTokenizer(str(folder / "vocab.txt"))
    ids = [tokenizer(t, max_length=DEFAULT_MAX_SEQ_LEN, truncation=True)["input_ids"] for t in TEXTS]
    (tmp_path / "ids.json").write_text(json.dumps(ids))
    env = {**os.environ, "FLAGS_enable_pir_api": "0"}  # read when paddle is imported: a process of its own
    argv = [str(folder), str(vocab_size), str(len(THUCNEWS_LABELS)), str(tmp_path / "ids.json"), str(tmp_path / "r")]
    done = subprocess.run([sys.executable, "-c", LEGACY_PROGRAM, *argv], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "inference.pdiparams",
        "inference.pdmodel",
        "vocab.txt",
    ]
    staged = run_cli_stages(folder, tmp_path / "work", SEQ_CLS)
    assert staged.static.model_file.name == "inference.pdmodel"
    assert staged.static.labels == THUCNEWS_LABELS
    reference = SimpleNamespace(
        ids=ids, logits=[np.array(x, np.float32) for x in json.loads((tmp_path / "r").read_text())]
    )
    assert onnx_vs_paddle(reference, staged) <= TOLERANCE


# ---------------------------------------------------------------------------------------------------------------
# What the checkpoint says is carried through, and what does not fit is refused with both numbers


def _cased_checkpoint(out: Path) -> Path:
    """The tiny checkpoint with "A" and "B" in its vocabulary (same size) and do_lower_case false."""
    from .conftest import make_tiny_checkpoint

    make_tiny_checkpoint(out)
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab[-2:] = ["A", "B"]
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (out / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": False, "tokenizer_class": "ErnieTokenizer"})
    )
    return out


def test_export_carries_max_seq_len_and_do_lower_case_to_every_tokenizer(tmp_path):
    from paddlenlp.transformers import ErnieTokenizer

    from ernie_deploy.cli import main
    from ernie_deploy.evaluate.offline import paddle_encoder
    from ernie_deploy.export.static import StaticModel
    from ernie_deploy.serving.encoding import encode_batch
    from ernie_deploy.serving.tokenizer import build_tokenizer, load_tokenizer, save_tokenizer

    checkpoint = _cased_checkpoint(tmp_path / "ck")
    argv = ["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "static"), "--max-seq-len", "16"]
    assert main(argv) == 0
    static = StaticModel.load(tmp_path / "static")
    meta = json.loads((tmp_path / "static" / "model.json").read_text())
    assert (meta["max_seq_len"], meta["max_positions"], meta["do_lower_case"]) == (16, 512, False)
    assert (static.max_seq_len, static.spec.max_seq_len, static.task.name, static.do_lower_case) == (
        16,
        16,
        "seq_cls",
        False,
    )
    text = "A b 国足" * 10
    paddle_ids = ErnieTokenizer(str(checkpoint / "vocab.txt"), do_lower_case=False)(
        text, max_length=16, truncation=True
    )
    # The tokenizer `build` serves is made from the exported vocab.txt alone: it reads do_lower_case beside it.
    save_tokenizer(static.vocab_file, tmp_path / "tokenizer.json")
    for tokenizer in (build_tokenizer(static.vocab_file), load_tokenizer(tmp_path / "tokenizer.json")):
        enc = encode_batch(tokenizer, [text], static.max_seq_len)
        assert enc.input_ids[0].tolist() == paddle_ids["input_ids"] and enc.truncated[0]
    assert paddle_encoder(static.spec, static.vocab_file)([text]).input_ids[0].tolist() == (paddle_ids["input_ids"])
    lowered = encode_batch(build_tokenizer(static.vocab_file, lowercase=True), [text], 16).input_ids[0].tolist()
    assert lowered != paddle_ids["input_ids"]  # so the comparison above could fail


def test_max_seq_len_beyond_the_positions_is_refused(tmp_path, capsys):
    from ernie_deploy.cli import main
    from ernie_deploy.core.errors import ErnieDeployError
    from ernie_deploy.export.onnx import check_parity
    from ernie_deploy.export.static import StaticModel

    from .conftest import make_tiny_checkpoint

    checkpoint = make_tiny_checkpoint(tmp_path / "ck")  # max_position_embeddings 512
    argv = ["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "static"), "--max-seq-len", "600"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "max_seq_len 600 is more than the model's 512 positions" in err and "--max-seq-len 512 or less" in err
    assert not (tmp_path / "static").exists()
    assert main([*argv[:-1], "512"]) == 0
    with pytest.raises(ErnieDeployError, match="max_seq_len 513 is more than the 512 positions"):
        static = StaticModel.load(tmp_path / "static")
        check_parity(static.spec.updated(max_seq_len=513), static, tmp_path / "unused.onnx", ["国足"])


def test_config_without_weights_is_named(tmp_path):
    from ernie_deploy.core.errors import ErnieDeployError
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint

    from .conftest import make_tiny_checkpoint

    checkpoint = make_tiny_checkpoint(tmp_path / "ck")
    (checkpoint / "model_state.pdparams").unlink()
    with pytest.raises(ErnieDeployError, match="has config.json but no weights: no model_state.pdparams") as err:
        inspect_checkpoint(checkpoint)
    assert "save_pretrained" in err.value.fix


@pytest.mark.parametrize("tokens,refused", [(18001, True), (17000, True), (18000, False), (17964, False)])
def test_vocab_size_must_fit_the_config(tmp_path, tokens, refused):
    """vocab_size 18,000 as ERNIE 1.0's config says: its released vocab.txt holds 17,964 tokens (a padded table)
    and is taken; a vocabulary larger than the table, or far smaller, is another model's and is refused."""
    from ernie_deploy.core.errors import ErnieDeployError
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint

    root = tmp_path / "ck"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"vocab_size": 18000, "max_position_embeddings": 513}))
    (root / "model_state.pdparams").write_bytes(b"")
    (root / "vocab.txt").write_text("\n".join(real_vocab(tokens)) + "\n", encoding="utf-8")
    if not refused:
        assert inspect_checkpoint(root).max_positions == 513
        return
    with pytest.raises(ErnieDeployError) as err:
        inspect_checkpoint(root)
    assert f"has {tokens:,} tokens but config.json says vocab_size 18,000" in err.value.problem
    assert "vocab.txt saved with this model" in err.value.fix


def test_static_model_without_vocab_is_refused_by_fetch(tmp_path, capsys):
    from ernie_deploy.cli import main

    root = tmp_path / "export"
    root.mkdir()
    for name in ("inference.json", "inference.pdiparams"):
        (root / name).write_bytes(b"{}")
    assert main(["fetch", str(root), "--out", str(tmp_path / "ck")]) == 2
    err = capsys.readouterr().err
    assert "no vocab.txt" in err and "place the tokenizer's vocab.txt next to the model files" in err
    assert not (tmp_path / "ck").exists()
