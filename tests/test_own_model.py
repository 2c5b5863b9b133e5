"""A checkpoint of one's own becomes a served, named model in one command, `scripts/convert.sh --task T --model NAME
--source DIR|URL [--sha256 HEX]`, run here as a user runs it:

- bad input is refused by name before anything is written (a folder that is no checkpoint, a head that is not the
  task's, a name another model's step takes, a URL without its sha256);
- the model joins the demo models, which stay byte for byte and keep answering as before, and it answers as its
  Paddle model does;
- in a checkout where only that model was made, `tritonserver --model-repository=models` serves it: the demo entries,
  whose files were never made, are left unloaded and named with the command that makes them, by the server and by
  `ernie-deploy check`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import SEQ_CLS, TOKEN_CLS
from ernie_deploy.pipeline.options import ExportOptions
from ernie_deploy.server.preflight import free_ports

from .conftest import ROOT, THUCNEWS_LABELS, artifacts, checkout_copy, make_tiny_checkpoint, wait_until_ready

TEXTS = ["国足公布世预赛名单", "股市大涨", "abc 123 新闻", "美元 1.5亿"]
DEMO_TEXTS = ["姚明缺阵火箭不敌湖人", "江泽民主席在北京会见了联合国秘书长。", "A股三大指数集体收涨"]
# Served probabilities against Paddle's own forward pass (float32 through onnxruntime: 1e-7 measured).
TOLERANCE = 1e-5


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _convert(checkout: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{checkout / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("ERNIE_DEPLOY_ARTIFACTS", None)  # the checkout's own artifacts/, as for a user
    return subprocess.run(
        ["bash", "scripts/convert.sh", *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def own_checkpoint(tmp_path_factory) -> Path:
    """A PaddleNLP save_pretrained folder of a classifier (random weights), as a user's fine-tuned model is."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("own") / "news", labels=["negative", "neutral", "positive"])


# -- refused before anything is written -----------------------------------------------------------------------------


def _refused(checkout: Path, args: list[str], *said: str) -> None:
    repository = checkout / "models"
    before = _files(repository)
    result = _convert(checkout, *args, timeout=300)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    for text in said:
        assert text in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert _files(repository) == before, "a refused convert changed the repository"
    assert not (checkout / "artifacts" / "checkpoints" / "news").exists(), "a refused convert wrote a checkpoint"


def test_a_folder_that_is_no_checkpoint_is_refused_naming_what_it_lacks(tmp_path, own_checkpoint):
    checkout = checkout_copy(tmp_path / "checkout", committed_models=True)
    weightless = tmp_path / "weightless"
    weightless.mkdir()
    shutil.copy(own_checkpoint / "config.json", weightless / "config.json")
    shutil.copy(own_checkpoint / "vocab.txt", weightless / "vocab.txt")
    _refused(
        checkout,
        ["--task", "seq_cls", "--model", "news", "--source", str(weightless)],
        "has config.json but no weights: no model_state.pdparams",
    )


def test_a_head_that_is_not_the_tasks_is_refused_naming_the_task_that_fits(tmp_path, own_checkpoint):
    checkout = checkout_copy(tmp_path / "checkout", committed_models=True)
    _refused(
        checkout,
        ["--task", "token_cls", "--model", "news", "--source", str(own_checkpoint)],
        "holds the head ErnieForSequenceClassification",
        "--task seq_cls",
    )


def test_a_static_model_whose_logits_are_not_the_tasks_is_refused(tmp_path, tiny_pipeline):
    from ernie_deploy.pipeline.add import check_new_model
    from ernie_deploy.pipeline.options import FetchOptions

    static = tiny_pipeline.static.root  # a Paddle static inference model of a classifier, vocab.txt beside it
    checkout = checkout_copy(tmp_path / "checkout", committed_models=True)
    _refused(
        checkout,
        ["--task", "token_cls", "--model", "news", "--source", str(static)],
        "is a static model that answers a label per text, and --task token_cls reads a label per token",
        "--task seq_cls",
    )
    # the task its logits fit passes the check, once its labels are named (no config.json beside this one)
    fetch = FetchOptions(source=str(static))
    with pytest.raises(ErnieDeployError, match="neither id2label nor num_labels"):
        check_new_model("seq_cls", "news", fetch, tmp_path / "models")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(THUCNEWS_LABELS))
    new = check_new_model("seq_cls", "news", fetch, tmp_path / "models", export=ExportOptions(labels=str(labels)))
    assert new.name == "news"


@pytest.mark.parametrize(
    "task, name, said",
    [
        ("seq_cls", "seq_cls", "names the folders of the files of demo model ernie_seqcls"),
        ("token_cls", "ernie_seqcls", "is the seq_cls demo model's, and this model is a token_cls model"),
        ("seq_cls", "ernie_tokenizer", "kept for the shared tokenizer steps"),
        ("seq_cls", "9news", "a letter first"),
    ],
)
def test_names_that_belong_to_something_else_are_refused(tmp_path, own_checkpoint, task, name, said):
    from ernie_deploy.pipeline.add import check_new_model
    from ernie_deploy.pipeline.options import FetchOptions

    with pytest.raises(ErnieDeployError, match=re.escape(said)):
        check_new_model(task, name, FetchOptions(source=str(own_checkpoint)), tmp_path / "models")


def test_bad_build_options_are_refused_before_the_work(tmp_path, own_checkpoint):
    from ernie_deploy.pipeline.add import check_new_model
    from ernie_deploy.pipeline.options import FetchOptions
    from ernie_deploy.repository.options import BuildOptions

    with pytest.raises(ErnieDeployError, match="--io paddlenlp"):
        check_new_model(
            "multi_label",
            "tags",
            FetchOptions(source=str(own_checkpoint)),
            tmp_path,
            build=BuildOptions(io="paddlenlp"),
        )


def test_a_relative_source_is_read_from_where_the_command_runs(tmp_path, own_checkpoint):
    checkout = checkout_copy(tmp_path / "checkout", committed_models=True)
    elsewhere = tmp_path / "work"
    shutil.copytree(own_checkpoint, elsewhere / "my-model")
    env = dict(os.environ, ERNIE_DEPLOY_PARSE_ONLY="1")
    # the user's shell is in work/, the script in the checkout: parse-only shows the path the run would use
    result = subprocess.run(
        ["bash", str(checkout / "scripts" / "convert.sh"), "--task", "token_cls", "--model", "news",
         "--source", "my-model"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr  # parses; the head is checked by the run itself
    result = _convert(checkout, "--task", "token_cls", "--model", "news", "--source", str(elsewhere / "my-model"))
    assert result.returncode == 2 and "holds the head ErnieForSequenceClassification" in result.stderr
    relative = subprocess.run(
        ["bash", str(checkout / "scripts" / "convert.sh"), "--task", "token_cls", "--model", "news",
         "--source", "my-model"],
        cwd=elsewhere, env=dict(os.environ, PATH=f"{checkout / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    # found where the user is (not "no such checkpoint" under the checkout), and refused for its head
    assert relative.returncode == 2 and "holds the head ErnieForSequenceClassification" in relative.stderr


def test_a_url_without_its_sha256_and_an_unnamed_checkpoint_are_refused(tmp_path, own_checkpoint):
    checkout = checkout_copy(tmp_path / "checkout", committed_models=True)
    _refused(
        checkout,
        ["--task", "seq_cls", "--model", "news", "--source", "https://127.0.0.1:9/news.tar.gz"],
        "--sha256 HEX",
    )
    _refused(checkout, ["--task", "seq_cls", "--source", str(own_checkpoint)], "--model NAME")


def test_a_name_that_another_models_step_takes_is_refused(tmp_path, own_checkpoint, tiny_pipeline):
    from ernie_deploy.repository.build import BuildOptions, build

    checkout = checkout_copy(tmp_path / "checkout")
    # `sports` served as an ensemble: its steps are sports_model and sports_postprocess
    build(artifacts(tiny_pipeline, "sports"), checkout / "models", BuildOptions(runtime="python", layout="ensemble"))
    _refused(
        checkout,
        ["--task", "seq_cls", "--model", "sports_model", "--source", str(own_checkpoint)],
        "collides with sports_model of model 'sports'",
    )


def test_help_lists_the_flags():
    result = subprocess.run(["bash", "scripts/convert.sh", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0
    for flag in ("--task", "--model", "--source", "--sha256", "--repository", "--quantize", "--runtime", "--io"):
        assert flag in result.stdout, flag


# -- served ---------------------------------------------------------------------------------------------------------


def _paddle_answers(checkpoint: Path, texts: list[str]) -> tuple[list[str], np.ndarray]:
    """Paddle's own forward pass over paddlenlp's ids: the labels and their probabilities."""
    import paddle
    from paddlenlp.transformers import ErnieForSequenceClassification, ErnieTokenizer

    model = ErnieForSequenceClassification.from_pretrained(str(checkpoint))
    model.eval()
    tokenizer = ErnieTokenizer(str(checkpoint / "vocab.txt"))
    labels, probabilities = [], []
    for text in texts:
        ids = tokenizer(text, max_length=128, truncation=True)["input_ids"]
        with paddle.no_grad():
            logits = model(paddle.to_tensor([ids]), paddle.zeros([1, len(ids)], dtype="int64")).numpy()[0]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        labels.append(model.config.id2label[int(p.argmax())])
        probabilities.append(float(p.max()))
    return labels, np.array(probabilities)


def _client(checkout: Path, url: str, *args: str) -> list[list[str]]:
    """`python clients/seq_cls_grpc_client.py --grpc-url URL ARGS` as a user runs it: its lines, split at tabs."""
    result = subprocess.run(
        [sys.executable, "clients/seq_cls_grpc_client.py", "--grpc-url", url, *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [line.split("\t") for line in result.stdout.splitlines() if line]


@pytest.mark.integration
def test_ones_own_model_joins_the_demo_models_which_keep_answering_as_before(
    tmp_path, own_checkpoint, repository, server
):
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.server.process import TritonServer

    with Client(SEQ_CLS, server.grpc_url) as client:
        demo_seq = client.predict(DEMO_TEXTS, progress=False)
    with Client(TOKEN_CLS, server.grpc_url) as client:
        demo_tok = client.predict(DEMO_TEXTS, progress=False)

    checkout = checkout_copy(tmp_path / "checkout")
    shutil.copytree(repository, checkout / "models")
    demo_files = _files(checkout / "models")
    result = _convert(checkout, "--task", "seq_cls", "--model", "news", "--source", str(own_checkpoint))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert 'python clients/seq_cls_grpc_client.py --model news --text "TEXT"' in result.stdout
    assert "bootstrap" not in result.stdout, "a checkpoint of one's own trains nothing"
    after = _files(checkout / "models")
    assert {k: v for k, v in after.items() if not k.startswith("news/")} == demo_files
    assert any(k.startswith("news/") for k in after)

    labels, probabilities = _paddle_answers(own_checkpoint, TEXTS)
    with TritonServer(checkout / "models", http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "log") as s:
        with Client(SEQ_CLS, s.grpc_url) as client:
            assert client.predict(DEMO_TEXTS, progress=False) == demo_seq
        with Client(TOKEN_CLS, s.grpc_url) as client:
            assert client.predict(DEMO_TEXTS, progress=False) == demo_tok
        answers = _client(checkout, s.grpc_url, "--model", "news", *(a for t in TEXTS for a in ("--text", t)))
    assert [a[0] for a in answers] == labels
    assert [a[2] for a in answers] == TEXTS
    # the client prints 4 decimals; the next test holds the served confidence itself to TOLERANCE
    assert np.abs(np.array([float(a[1]) for a in answers]) - probabilities).max() <= 5e-5 + TOLERANCE


@pytest.mark.integration
def test_a_checkout_where_only_ones_own_model_was_made_serves_it(tmp_path, own_checkpoint):
    from ernie_deploy.client.grpc_client import Client

    checkout = checkout_copy(tmp_path / "checkout", committed_models=True)
    result = _convert(checkout, "--task", "seq_cls", "--model", "news", "--source", str(own_checkpoint))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not (checkout / "artifacts" / "checkpoints" / "seq_cls").exists(), "no demo model was made"

    venv_bin = checkout / ".venv" / "bin"
    check = subprocess.run(
        [str(venv_bin / "ernie-deploy"), "check", "--repository", "models"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ernie_tokencls: never made" in check.stdout and "`scripts/convert.sh --task token_cls`" in check.stdout
    assert "ernie_seqcls: never made" in check.stdout and "`scripts/convert.sh --task seq_cls`" in check.stdout
    assert "news: seq_cls model" in check.stdout

    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    log = open(tmp_path / "tritonserver.out", "w+")
    server = subprocess.Popen(
        ["tritonserver", "--model-repository=models", f"--http-port={http}", f"--grpc-port={grpc}",
         f"--metrics-port={metrics}"],
        cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until_ready(server, http, tmp_path / "tritonserver.out", timeout=180)
        labels, probabilities = _paddle_answers(own_checkpoint, TEXTS)
        with Client(SEQ_CLS, f"127.0.0.1:{grpc}", model="news") as client:
            out = client.infer(TEXTS)
        assert [x.decode() for x in out["label"][:, 0]] == labels
        assert np.abs(out["confidence"][:, 0] - probabilities).max() <= TOLERANCE
    finally:
        server.terminate()
        server.wait(timeout=60)
    out = (tmp_path / "tritonserver.out").read_text()
    assert "skipped: ernie_tokencls: never made" in out and "make it with `scripts/convert.sh --task token_cls`" in out


# -- entries never made ---------------------------------------------------------------------------------------------


def _committed_models(dest: Path) -> Path:
    committed_files = ("models/*/config.pbtxt", "models/*/1/model.py", "models/*/*/model.json")
    for committed in [path for pattern in committed_files for path in ROOT.glob(pattern)]:
        target = dest / committed.relative_to(ROOT / "models")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(committed, target)
    return dest


def test_entries_never_made_are_left_out_and_named_with_the_command_that_makes_them(tmp_path, tiny_pipeline):
    from ernie_deploy.repository.build import BuildOptions, build
    from ernie_deploy.repository.check import check_repository
    from ernie_deploy.repository.served import load_plan, served_models

    repo = _committed_models(tmp_path / "models")
    build(artifacts(tiny_pipeline, "news"), repo, BuildOptions(runtime="python", layout="fused"))
    plan = load_plan(repo)
    assert {u.name: u.command(repo) for u in plan.skipped} == {
        "ernie_seqcls": f"scripts/convert.sh --task seq_cls --repository {repo}",
        "ernie_tokencls": f"scripts/convert.sh --task token_cls --repository {repo}",
    }
    assert "ernie_seqcls" not in plan.load and "ernie_tokencls" not in plan.load
    assert plan.load == ("news",)
    assert list(served_models(repo)) == ["news"]
    assert check_repository(repo) == []  # a model to make is no fault of the files that are there
    # a leftover config no model uses is left out too, and named as one
    shutil.copytree(repo / "ernie_seqcls", repo / "leftover")
    (repo / "leftover" / "config.pbtxt").write_text(
        (repo / "leftover" / "config.pbtxt")
        .read_text()
        .replace('name: "ernie_seqcls"', 'name: "leftover"')
        .replace('key: "task"', 'key: "not_a_task"')
    )
    assert load_plan(repo).orphans == ("leftover",) and "leftover" not in load_plan(repo).load
    shutil.rmtree(repo / "leftover")
    # a model that holds some of its files: broken, not unmade; `check` names the missing file, and the server would
    # fail to load it, as any broken model
    (repo / "news" / "1" / "model.onnx").unlink()
    assert "news" not in {u.name for u in load_plan(repo).skipped}
    problems = [str(p) for p in check_repository(repo)]
    assert any(p.startswith("news:") and "model.onnx" in p for p in problems), problems


def test_a_repository_where_nothing_was_made_is_refused_by_name(tmp_path, capsys):
    from ernie_deploy.cli.tritonserver import main

    repo = _committed_models(tmp_path / "models")
    assert main([f"--model-repository={repo}"]) == 2
    err = capsys.readouterr().err
    assert "skipped: ernie_tokencls: never made" in err
    assert "none of them was made" in err and "bash scripts/quickstart.sh" in err
