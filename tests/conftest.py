"""Shared fixtures: a tiny random ERNIE for fast tests, the real bootstrap pipeline and a real server for
integration tests. Heavy results (archives, the trained bootstrap model) come from the content-keyed cache."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from ernie_deploy.core.tasks import PAIR_CLS, SEQ_CLS, TOKEN_CLS

ROOT = Path(__file__).resolve().parents[1]
THUCNEWS_LABELS = [
    "education",
    "entertainment",
    "finance",
    "game",
    "politics",
    "realty",
    "science",
    "society",
    "sports",
    "stocks",
]
MSRA_LABELS = ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER"]


@dataclass
class Pipeline:
    """What the stages produce for one task: checkpoint, static model, ONNX file, data splits."""

    task: object
    checkpoint: Path
    static: object  # ernie_deploy.export.static.StaticModel
    onnx: Path
    data: Path | None


def make_tiny_checkpoint(out: Path, labels=THUCNEWS_LABELS, seed: int = 0, task=SEQ_CLS) -> Path:
    """A random-init ERNIE for the task, small enough to export and convert in seconds."""
    import paddle
    import paddlenlp.transformers as ppt
    from paddlenlp.transformers import ErnieConfig

    paddle.seed(seed)
    chars = sorted(set("国足公布世预赛名单股市大涨新闻体育财经房产游戏教育科技社会娱乐时政中国美元亿"))
    latin = list("abcdefghijklmnopqrstuvwxyz0123456789")
    vocab = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *chars, *latin, *(f"##{c}" for c in latin)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = ErnieConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        type_vocab_size=4,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    getattr(ppt, task.paddle_class)(config).save_pretrained(str(out))
    return out


def artifacts(pipeline: Pipeline, name: str | None = None, *, onnx=None, **fields):
    """`pipeline`'s converted model as `build` takes it (repository.build.ModelArtifacts): its record as exported,
    under `name` if given, with `fields` changed (another task, labels or decoding), from `onnx` if given (another
    precision of it). A model given another task and no name takes that task's demo name."""
    from ernie_deploy.core.tasks import DEMO_MODELS
    from ernie_deploy.repository.build import ModelArtifacts

    name = name or (DEMO_MODELS[fields["task"]] if "task" in fields else pipeline.static.spec.name)
    model = replace(pipeline.static.spec, name=name, **fields)
    return ModelArtifacts(model, onnx or pipeline.onnx, pipeline.static.vocab_file)


def tokenizer_step(config: dict, folder: Path):
    """serving's TokenizerStep of `config` in `folder`, holding the request limits `build` writes on every tokenizer
    (the defaults) where `config` sets none."""
    from ernie_deploy.serving.limits import ReadingLimits
    from ernie_deploy.serving.tokenizer_steps import TokenizerStep

    limits = {key: {"string_value": str(value)} for key, value in ReadingLimits().parameters().items()}
    return TokenizerStep({**config, "parameters": {**limits, **config.get("parameters", {})}}, folder)


def run_stages(task, checkpoint_dir: Path, work: Path, data: Path | None = None) -> Pipeline:
    from ernie_deploy.export.onnx import convert
    from ernie_deploy.export.static import export
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint

    static = export(inspect_checkpoint(checkpoint_dir), task, work / "static")
    onnx_path = convert(static, work / "onnx" / "model.onnx")
    return Pipeline(task, checkpoint_dir, static, onnx_path, data)


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory) -> Pipeline:
    work = tmp_path_factory.mktemp("tiny")
    return run_stages(SEQ_CLS, make_tiny_checkpoint(work / "checkpoint"), work)


# Texts the two tiny classifier versions answer differently enough to tell apart (rollout tests).
NEWS_TEXTS = [
    "国足公布世预赛名单",
    "股市大涨",
    "abc 123 新闻",
    "美元 1.5亿",
    "新闻 财经 房产",
    "游戏 教育 科技 社会",
    "娱乐时政",
    "中国",
]


@pytest.fixture(scope="session")
def tiny_pipeline_v2(tmp_path_factory) -> Pipeline:
    """The same shape and vocabulary as tiny_pipeline, other weights: a retrained model's next version."""
    work = tmp_path_factory.mktemp("tiny_v2")
    return run_stages(SEQ_CLS, make_tiny_checkpoint(work / "checkpoint", seed=1), work)


@pytest.fixture(scope="session")
def tiny_token_pipeline(tmp_path_factory) -> Pipeline:
    work = tmp_path_factory.mktemp("tiny_token")
    return run_stages(TOKEN_CLS, make_tiny_checkpoint(work / "checkpoint", MSRA_LABELS, task=TOKEN_CLS), work)


@pytest.fixture(scope="session")
def thucnews() -> Path:
    from ernie_deploy.fetch.datasets import prepare

    return prepare("thucnews")


def bootstrap_pipeline(task, tmp_path_factory) -> Pipeline:
    """The real path for a task: its bootstrap model (trained once, then cached) exported and converted."""
    from ernie_deploy.fetch.datasets import prepare
    from ernie_deploy.train.bootstrap import train

    data = prepare(task.dataset)
    return run_stages(task, train(task, data, progress=False), tmp_path_factory.mktemp(task.name), data)


@pytest.fixture(scope="session")
def seq_cls_pipeline(tmp_path_factory, thucnews) -> Pipeline:
    """The bootstrap classifier."""
    return bootstrap_pipeline(SEQ_CLS, tmp_path_factory)


@pytest.fixture(scope="session")
def pair_cls_pipeline(tmp_path_factory) -> Pipeline:
    """The bootstrap pair classifier (started from the classifier's encoder)."""
    return bootstrap_pipeline(PAIR_CLS, tmp_path_factory)


@pytest.fixture(scope="session")
def embed_pipeline(tmp_path_factory) -> Pipeline:
    """The demo embed model (trained from the classifier's encoder on InsuranceQA)."""
    from ernie_deploy.core.tasks import EMBED

    return bootstrap_pipeline(EMBED, tmp_path_factory)


@pytest.fixture(scope="session")
def rerank_pipeline(tmp_path_factory) -> Pipeline:
    """The demo rerank model (trained from the embed model's encoder on its hard negatives)."""
    from ernie_deploy.core.tasks import RERANK

    return bootstrap_pipeline(RERANK, tmp_path_factory)


@pytest.fixture(scope="session")
def msra_ner() -> Path:
    from ernie_deploy.fetch.datasets import prepare

    return prepare("msra_ner")


@pytest.fixture(scope="session")
def token_cls_pipeline(tmp_path_factory, msra_ner) -> Pipeline:
    """The bootstrap NER model."""
    return bootstrap_pipeline(TOKEN_CLS, tmp_path_factory)


@pytest.fixture(scope="session")
def msra_multilabel() -> Path:
    from ernie_deploy.fetch.datasets import prepare

    return prepare("msra_multilabel")


@pytest.fixture(scope="session")
def multi_label_pipeline(tmp_path_factory, msra_multilabel) -> Pipeline:
    """The bootstrap multi-label model (trained once from the token_cls encoder, then cached) exported and
    converted the way `ernie-deploy convert` does it: parity-gated, thresholds chosen on the dev split beside it."""
    from ernie_deploy.core.tasks import MULTI_LABEL
    from ernie_deploy.export.gates import Gates
    from ernie_deploy.export.onnx import convert_checked
    from ernie_deploy.export.static import export
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint
    from ernie_deploy.fetch.data import split_file
    from ernie_deploy.train.bootstrap import train

    work = tmp_path_factory.mktemp("multi_label")
    checkpoint = train(MULTI_LABEL, msra_multilabel, progress=False)
    static = export(inspect_checkpoint(checkpoint), MULTI_LABEL, work / "static")
    onnx_path = convert_checked(
        static,
        work / "onnx" / "model.onnx",
        gates=Gates(tuple(PARITY_TEXTS)),
        thresholds_dev=split_file(msra_multilabel, "dev", MULTI_LABEL.split_format),
        log=lambda line: None,
    )
    return Pipeline(MULTI_LABEL, checkpoint, static, onnx_path, msra_multilabel)


@pytest.fixture(scope="session")
def uie_pipeline(tmp_path_factory, msra_ner) -> Pipeline:
    """The bootstrap extraction model (trained once from the token_cls encoder, then cached) exported and converted
    the way `ernie-deploy convert` does it: both probabilities parity-gated, its record beside them."""
    from ernie_deploy.core.tasks import UIE
    from ernie_deploy.export.static import export
    from ernie_deploy.export.uie import convert_uie_checked
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint
    from ernie_deploy.train.bootstrap import train

    work = tmp_path_factory.mktemp("uie")
    checkpoint = train(UIE, msra_ner, progress=False)
    static = export(inspect_checkpoint(checkpoint), UIE, work / "static")
    convert_uie_checked(static, work / "onnx" / "model.onnx", log=lambda line: None)
    return Pipeline(UIE, checkpoint, static, work / "onnx" / "model.onnx", msra_ner)


@pytest.fixture(scope="session")
def repository(tmp_path_factory, seq_cls_pipeline, token_cls_pipeline) -> Path:
    """Both tasks built the way `scripts/convert.sh` builds models/ on a pip-only machine."""
    from ernie_deploy.repository.build import BuildOptions, build, model_artifacts

    repo = tmp_path_factory.mktemp("models")
    entries = [model_artifacts(p.static, p.onnx) for p in (seq_cls_pipeline, token_cls_pipeline)]
    build(entries, repo, BuildOptions(runtime="python", layout="auto"))
    return repo


@pytest.fixture(scope="session")
def ensemble_repository(tmp_path_factory, seq_cls_pipeline, token_cls_pipeline) -> Path:
    """Both tasks in the ensemble layout: one shared tokenizer, a model and a postprocess step each (for tests of
    what happens to one step)."""
    from ernie_deploy.repository.build import BuildOptions, build, model_artifacts

    repo = tmp_path_factory.mktemp("ensemble_models")
    entries = [model_artifacts(p.static, p.onnx) for p in (seq_cls_pipeline, token_cls_pipeline)]
    build(entries, repo, BuildOptions(runtime="python", layout="ensemble"))
    return repo


@pytest.fixture(scope="session")
def every_kind_server(
    tmp_path_factory, seq_cls_pipeline, token_cls_pipeline, pair_cls_pipeline, multi_label_pipeline, uie_pipeline
):
    """Every task kind's bootstrap model in one repository, on one real tritonserver (what a user serving several
    models of several kinds runs): the classifiers and the tagger as ensembles, the extraction model in its own
    layout (one python model: its stages cannot be ensemble steps)."""
    from ernie_deploy.repository.build import BuildOptions, build, model_artifacts
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path_factory.mktemp("every_kind")
    pipelines = (seq_cls_pipeline, token_cls_pipeline, pair_cls_pipeline, multi_label_pipeline)
    build(
        [model_artifacts(p.static, p.onnx) for p in pipelines], repo, BuildOptions(runtime="python", layout="ensemble")
    )
    build(model_artifacts(uie_pipeline.static, uie_pipeline.onnx), repo, BuildOptions(runtime="python"))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "every_kind.log") as s:
        yield s


@pytest.fixture(scope="session")
def retrieval_work(tmp_path_factory) -> Path:
    """A folder holding the retrieval repository (tests/retrieval_fixtures.py: build_retrieval_repository) at
    ./models and the checkpoints its models were converted from at ./sources/<form>."""
    from tests.retrieval_fixtures import build_retrieval_repository

    work = tmp_path_factory.mktemp("retrieval")
    build_retrieval_repository(work)
    return work


@pytest.fixture(scope="session")
def retrieval_server(retrieval_work):
    """A real tritonserver on 127.0.0.1 (free ports) serving the retrieval repository's embed and rerank models."""
    from ernie_deploy.server.process import TritonServer

    with TritonServer(
        retrieval_work / "models", http_port=0, grpc_port=0, metrics_port=0, log_file=retrieval_work / "server.log"
    ) as s:
        yield s


@pytest.fixture(scope="session")
def retrieval_gateway(retrieval_server, retrieval_work):
    """A gateway process (default limits: 32 texts a request) in front of the retrieval server."""
    from ernie_deploy.gateway.process import GatewayProcess

    process = GatewayProcess(
        retrieval_work / "models", retrieval_server.grpc_url, log_file=retrieval_work / "gateway-retrieval.log"
    )
    with process.start(timeout=60):
        yield process


@pytest.fixture(scope="session")
def server(repository, tmp_path_factory):
    """A real tritonserver on 127.0.0.1 (free ports) serving both tasks."""
    from ernie_deploy.server.process import TritonServer

    log = tmp_path_factory.mktemp("server") / "server.log"
    server = TritonServer(repository, http_port=0, grpc_port=0, metrics_port=0, log_file=log)
    server.start(timeout=180)
    yield server
    server.stop()


# Texts for convert's parity and drift checks: Chinese, Latin, digits, and one past max_seq_len.
PARITY_TEXTS = [
    "国足公布世预赛名单",
    "股市大涨",
    "abc 123 新闻",
    "美元 1.5亿",
    "体育" * 80,
    "中国",
    "新闻 财经 房产",
    "游戏 教育 科技 社会",
    "娱乐时政",
    "国足 1 : 0 美元",
]


def named_artifacts(pipeline: Pipeline, name: str, root: Path) -> Path:
    """`pipeline`'s static model and ONNX file as model `name`'s artifacts under `root` (what `build --name` reads
    when ERNIE_DEPLOY_ARTIFACTS points there)."""
    import shutil

    shutil.copytree(pipeline.static.root, root / "static" / name)
    (root / "onnx" / name).mkdir(parents=True)
    shutil.copy(pipeline.onnx, root / "onnx" / name / "model.onnx")
    return root


def convert_argv(static_root, tmp_path: Path, texts=PARITY_TEXTS) -> tuple[Path, list[str]]:
    """`ernie-deploy convert` of a seq_cls static model into tmp_path/onnx/model.onnx, checked on `texts`."""
    parity = tmp_path / "parity.tsv"
    parity.write_text("label\ttext\n" + "".join(f"sports\t{t}\n" for t in texts), encoding="utf-8")
    out = tmp_path / "onnx" / "model.onnx"
    argv = ["convert", "--task", "seq_cls", "--static", str(static_root), "--out", str(out)]
    return out, [*argv, "--parity-data", str(parity)]


def io_signature(path) -> tuple[list, list]:
    """An ONNX file's inputs and outputs as (name, element type, dims) for comparing two models."""
    import onnx

    model = onnx.load(str(path))

    def describe(v):
        return v.name, v.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    return [describe(v) for v in model.graph.input], [describe(v) for v in model.graph.output]


def assert_refused_convert_changes_nothing(argv: list[str], out, kind: str, capsys) -> None:
    """`ernie-deploy convert argv` fails a gate: exit 2 with the FP32 fix, every file beside `out` stays byte for
    byte, and the refused run's report (its `kind` section failing) is kept as parity.rejected.json."""
    from ernie_deploy.cli import main

    before = {p.name: p.read_bytes() for p in out.parent.iterdir()}
    assert main(argv) == 2
    assert "serve the FP32 model" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.parent.iterdir() if p.name != "parity.rejected.json"} == before
    assert json.loads((out.parent / "parity.rejected.json").read_text())[kind]["ok"] is False


def shipped_scores(task: str) -> dict:
    """What the shipped demo model of `task` scores (its manifest's `scores`: dev, and test by Paddle and ONNX): with
    the weights shipped, every machine scores exactly these."""
    from ernie_deploy.fetch.shipped import manifest

    return manifest(task)["scores"]


def checkout_copy(dest: Path, committed_models: bool = False) -> Path:
    """What a clone holds that the scripts read (scripts/, clients/, setup.cfg; with `committed_models` the
    committed files of models/), with this test run's environment as its .venv: a script run in `dest` writes its
    artifacts/ and models/ there, never into this checkout."""
    venv = Path(sys.executable).parent.parent
    stamps = sorted(venv.glob(".installed-*"), key=lambda p: p.stat().st_mtime)
    if not stamps:
        pytest.skip(
            f"{venv} was not made by scripts/_env.sh (no .installed-* stamp), so the scripts would install into it; "
            "run the tests with bash scripts/test.sh"
        )
    dest.mkdir()
    for name in ("scripts", "clients"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    if committed_models:
        committed_files = ("models/*/config.pbtxt", "models/*/1/model.py", "models/*/*/model.json")
        for committed in [path for pattern in committed_files for path in ROOT.glob(pattern)]:
            target = dest / committed.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(committed, target)
    shutil.copy2(ROOT / "setup.cfg", dest / "setup.cfg")
    # _env.sh reinstalls when setup.cfg is newer than the environment's stamp: older, the copy's scripts use the
    # environment as it is (a reinstall from the copy would point it at a temporary folder).
    older = stamps[0].stat().st_mtime - 1
    os.utime(dest / "setup.cfg", (older, older))
    (dest / ".venv").symlink_to(venv)
    return dest


def wait_until_ready(server, http_port: int, log: Path, timeout: float) -> None:
    """Return once the tritonserver a test started as a user does (`server`, a Popen whose output goes to `log`)
    answers ready on `http_port`; fail with its log if it exits first, or with the wait if `timeout` s pass."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert server.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"tritonserver was not ready after {timeout:.0f} s"
        time.sleep(0.5)


def serve_bytes(body: bytes, status: int = 200):
    """A local HTTP server on 127.0.0.1 answering every GET with `body` (another service on a port, a page that is
    not Triton's, an endless answer); the caller shuts it down."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd
