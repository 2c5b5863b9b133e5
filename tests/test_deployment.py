"""The deployment file and `ernie-deploy apply` (ernie_deploy.pipeline.deploy): a repository rebuilt from a list of
named models, each stage's options the same typed objects its command fills."""

from __future__ import annotations

import functools
import hashlib
import http.server
import tarfile
import threading
from pathlib import Path

import pytest

from ernie_deploy.cli import main
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.pipeline.deploy import deploy, plan
from ernie_deploy.repository.deployment import load_deployment
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.served import served_models
from tests.conftest import MSRA_LABELS, make_tiny_checkpoint

SHA = "a" * 64


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_is_read_with_paths_relative_to_it(tmp_path):
    path = _write(
        tmp_path,
        f"""
repository: served
build: {{runtime: python}}
models:
  - {{name: news, task: seq_cls, source: https://example.org/news.tar.gz, sha256: {SHA.upper()}}}
  - {{name: people, task: token_cls, source: bootstrap, fetch: {{budget: 5}}}}
  - {{name: local, task: seq_cls, source: ckpt/news}}
""",
    )
    deployment = load_deployment(path)
    assert deployment.repository == tmp_path / "served"
    assert deployment.build == {"runtime": "python"}
    assert [(m.name, m.task) for m in deployment.models] == [
        ("news", "seq_cls"),
        ("people", "token_cls"),
        ("local", "seq_cls"),
    ]
    assert deployment.models[0].sha256 == SHA and deployment.models[0].is_url
    assert deployment.models[1].options == {"fetch": {"budget": 5}}
    assert deployment.models[2].source == str(tmp_path / "ckpt" / "news")


@pytest.mark.parametrize(
    ("text", "field", "fix"),
    [
        ("- 1", "deploy.yaml", "models"),
        ("models: []", "models", "at least one model"),
        ("modles: [{name: a, task: seq_cls, source: bootstrap}]", "modles", "use only"),
        ("models: [{task: seq_cls, source: bootstrap}]", "models[0].name", "give the model's name"),
        ("models: [{name: 1a, task: seq_cls, source: bootstrap}]", "models[0].name", "a letter first"),
        ("models: [{name: a, task: ner, source: bootstrap}]", "models[0].task", "seq_cls, token_cls"),
        ("models: [{name: a, task: seq_cls, source: 'http://x/a.tgz'}]", "models[0].sha256", "sha256sum"),
        ("models: [{name: a, task: seq_cls, source: 'http://x/a.tgz', sha256: abc}]", "models[0].sha256", "64 hex"),
        ("models: [{name: a, task: seq_cls, source: bootstrap, sha256: " + SHA + "}]", "models[0].sha256", "remove"),
        ("models: [{name: a, task: seq_cls, source: bootstrap, lables: x}]", "models[0].lables", "use only"),
        ("models: [{name: a, task: seq_cls, source: bootstrap, fetch: 5}]", "models[0].fetch", "budget: 5"),
        ("models: [{name: a, task: seq_cls, source: bootstrap, fetch: {budget: [1]}}]", "models[0].fetch.budget", ""),
        (
            "models: [{name: a, task: seq_cls, source: bootstrap}, {name: a, task: token_cls, source: bootstrap}]",
            "models[1].name",
            "its own name",
        ),
        ("models: [{name: a, task: seq_cls, source: bootstrap}]\nrepository: ''", "repository", "repository: models"),
        ("models: [{name: a, task: seq_cls, source: bootstrap}", "not valid YAML", "fix the line"),
    ],
)
def test_a_bad_field_is_named_with_its_fix(tmp_path, text, field, fix):
    with pytest.raises(ErnieDeployError) as err:
        load_deployment(_write(tmp_path, text))
    assert field in err.value.problem and fix in str(err.value)


@pytest.mark.parametrize(
    ("stage", "options", "problem"),
    [
        ("convert", "{quantise: int8}", "models[0].convert.quantise: unknown option"),
        ("convert", "{quantize: int4}", "models[0].convert.quantize: 'int4' is not one of none, int8"),
        ("convert", "{skip_parity: 1}", "models[0].convert.skip_parity: is a switch"),
        ("convert", "{parity_n: 2.5}", "models[0].convert.parity_n: needs a whole number"),
        ("convert", "{tolerance: small}", "models[0].convert.tolerance: needs a number"),
        ("convert", "{fp16: true, quantize: int8}", "models[0].convert: --fp16 and --quantize int8"),
        ("convert", "{dev: dev.tsv}", "models[0].convert: --dev chooses a multi-label model's thresholds"),
        ("convert", "{calibration_data: texts.txt}", "models[0].convert: --calibration-data fixes"),
        ("export", "{out: elsewhere}", "models[0].export.out: is set by apply"),
        ("export", "{max_seq_len: '64'}", "models[0].export.max_seq_len: needs a whole number"),
        ("export", "{ner_decoding: argmax}", "models[0].export: --ner-decoding sets how a token model"),
        ("fetch", "{source: elsewhere}", "models[0].fetch.source: is set by apply"),
        ("fetch", "{budget: [5]}", "models[0].fetch.budget: must be a single value"),
        ("fetch", "{epochs: 3}", "models[0].fetch.epochs: unknown option"),
    ],
)
def test_stage_options_are_checked_before_any_work(tmp_path, capsys, monkeypatch, stage, options, problem):
    monkeypatch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(tmp_path / "artifacts"))
    path = _write(tmp_path, f"models: [{{name: a, task: seq_cls, source: bootstrap, {stage}: {options}}}]")
    assert main(["apply", str(path), "--dry-run"]) == 2
    err = capsys.readouterr()
    assert problem in err.err and "==>" not in err.out
    # Not even a real run starts any work: the plan is checked whole first.
    assert main(["apply", str(path)]) == 2
    assert problem in capsys.readouterr().err
    assert not (tmp_path / "artifacts").exists() and not (tmp_path / "models").exists()


def test_an_unknown_option_is_named_with_the_ones_there_are(tmp_path):
    path = _write(tmp_path, "models: [{name: a, task: seq_cls, source: bootstrap, fetch: {budjet: 5}}]")
    with pytest.raises(ErnieDeployError) as err:
        plan(path)
    # The model's fields (source, sha256, bootstrap) are not the stage's to set: not offered.
    assert err.value.problem == "models[0].fetch.budjet: unknown option"
    assert err.value.fix == "use one of: budget, force, train"


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        ("{runtime: tensorrt}", "deploy.yaml: build.runtime: 'tensorrt' is not one of auto, onnxruntime, python"),
        ("{no_ragged: true}", "deploy.yaml: build.no_ragged: unknown option"),
        ("{ort_spinning: off}", "deploy.yaml: build.ort_spinning: needs text, got False"),
        ("{instances: true}", "deploy.yaml: build.instances: needs a whole number"),
        ("{repository: elsewhere}", "deploy.yaml: build.repository: is set by apply"),
        ("{runtime: python, device: gpu}", "deploy.yaml: build: --device gpu needs the ONNX Runtime backend"),
        ("{ner_decoding: argmax}", "deploy.yaml: build: --ner-decoding sets how a token model decodes entities"),
    ],
)
def test_build_options_are_checked_before_any_work(tmp_path, build, problem):
    path = _write(tmp_path, f"build: {build}\nmodels: [{{name: a, task: seq_cls, source: bootstrap}}]")
    with pytest.raises(ErnieDeployError) as err:
        plan(path)
    assert problem in err.value.problem and err.value.fix


def _options_of(argv: list[str]):
    """The options object a command fills from its flags, through the command's own code."""
    from ernie_deploy.cli import build as build_cmd
    from ernie_deploy.cli import build_parser, convert, export, fetch

    args = build_parser().parse_args(argv)
    return {"fetch": fetch, "export": export, "convert": convert, "build": build_cmd}[argv[0]].options(args)


def test_a_deployment_file_and_the_commands_make_identical_options(tmp_path):
    (tmp_path / "ckpt").mkdir()
    path = _write(
        tmp_path,
        f"""
build: {{runtime: onnxruntime, instances: 2, ragged: false, layout: graph-postprocess, max_text_chars: 5000}}
models:
  - name: news
    task: seq_cls
    source: 'https://example.org/n.tgz'
    sha256: {SHA}
    convert: {{quantize: int8, tolerance: 1, calibration_n: 64, optimize: true}}
  - name: people
    task: token_cls
    source: bootstrap
    fetch: {{budget: 5, force: true}}
    export: {{ner_decoding: argmax, max-seq-len: 256}}
    convert: {{fp16: true, skip_parity: true, opset: 14}}
  - {{name: local, task: seq_cls, source: ckpt}}
""",
    )
    planned = plan(path)
    news, people, local = planned.models
    assert news.fetch == _options_of(["fetch", "https://example.org/n.tgz", "--sha256", SHA, "--model", "news"])
    assert people.fetch == _options_of(["fetch", "--bootstrap", "--budget", "5", "--force", "--task", "token_cls"])
    assert local.fetch == _options_of(["fetch", str(tmp_path / "ckpt"), "--model", "local"])
    assert news.export == local.export == _options_of(["export", "--model", "news"])
    assert people.export == _options_of(["export", "--ner-decoding", "argmax", "--max-seq-len", "256"])
    assert news.convert == _options_of(
        ["convert", "--quantize", "int8", "--tolerance", "1", "--calibration-n", "64", "--optimize"]
    )
    assert people.convert == _options_of(["convert", "--fp16", "--skip-parity", "--opset", "14"])
    assert local.convert == _options_of(["convert", "--model", "local"])
    flags = ["--runtime", "onnxruntime", "--instances", "2", "--no-ragged", "--graph-postprocess"]
    flags += ["--max-text-chars", "5000"]
    assert planned.build == _options_of(["build", *flags])
    # Typed as the flags are: a whole number given for a float option is that float.
    assert type(news.convert.tolerance) is float and type(people.fetch.budget) is float
    # Nothing given: the commands' defaults, runtime and layout chosen when the build runs.
    empty = _write(tmp_path, "models: [{name: a, task: seq_cls, source: bootstrap}]")
    assert plan(empty).build == _options_of(["build"]) == BuildOptions() == BuildOptions(runtime="auto", layout="auto")


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(tmp_path / "artifacts"))
    path = _write(
        tmp_path,
        f"""
build: {{runtime: python, instances: 2}}
models:
  - {{name: news, task: seq_cls, source: 'https://example.org/n.tgz', sha256: {SHA}, convert: {{quantize: int8}}}}
  - {{name: people, task: token_cls, source: bootstrap, fetch: {{budget: 5, force: false}}}}
""",
    )
    assert main(["apply", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"==> news (seq_cls): fetch source=https://example.org/n.tgz sha256={SHA}\n" in out
    assert "==> people (token_cls): fetch bootstrap=True budget=5.0\n" in out
    assert "==> news (seq_cls): export (defaults)\n" in out
    assert "==> news (seq_cls): convert quantize=int8\n" in out
    assert f"==> build news, people into {tmp_path / 'models'}: runtime=python instances=2\n" in out
    order = [out.index(f"==> news (seq_cls): {stage}") for stage in ("fetch", "export", "convert")]
    assert out.index("==> data: ") < order[0] < order[1] < order[2] < out.index("==> build")
    assert not (tmp_path / "artifacts").exists() and not (tmp_path / "models").exists()


def test_a_failing_stage_is_named_with_its_place_in_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setattr("ernie_deploy.pipeline.deploy._prepare", lambda datasets, log: None)
    path = _write(tmp_path, "models: [{name: news, task: seq_cls, source: missing}]")
    lines = []
    with pytest.raises(ErnieDeployError) as err:
        deploy(path, log=lines.append)
    assert err.value.problem.startswith("deploy.yaml: models[0] (news): fetch: ")
    assert "run apply again (the repository was left as it was)" in err.value.fix
    assert lines[-1].startswith("==> news (seq_cls): fetch source=")


@pytest.fixture
def archive_server(tmp_path):
    """A plain HTTP server on 127.0.0.1 serving tmp_path/www."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield www, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_apply_builds_exactly_the_listed_models_from_a_url_and_a_folder(tmp_path, monkeypatch, archive_server):
    www, url = archive_server
    monkeypatch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(tmp_path / "artifacts"))
    news = make_tiny_checkpoint(tmp_path / "ckpt" / "news")
    with tarfile.open(www / "news.tar.gz", "w:gz") as tar:
        tar.add(news, arcname="news")
    sha = hashlib.sha256((www / "news.tar.gz").read_bytes()).hexdigest()
    from ernie_deploy.core.tasks import TOKEN_CLS

    make_tiny_checkpoint(tmp_path / "ckpt" / "people", MSRA_LABELS, task=TOKEN_CLS)
    models = f"""
  - {{name: news, task: seq_cls, source: '{url}/news.tar.gz', sha256: {sha}}}
  - {{name: people, task: token_cls, source: ckpt/people}}"""
    path = _write(tmp_path, f"build: {{runtime: python, layout: ensemble}}\nmodels:{models}")
    assert main(["apply", str(path)]) == 0
    repo = tmp_path / "models"
    assert {name: model.task for name, model in served_models(repo).items()} == {
        "news": "seq_cls",
        "people": "token_cls",
    }
    assert main(["check", "-r", str(repo)]) == 0
    # The file drops `news`: apply removes it and its steps, and keeps the shared tokenizer `people` uses.
    path.write_text(
        "build: {runtime: python, layout: ensemble}\nmodels:\n" + models.splitlines()[2] + "\n", encoding="utf-8"
    )
    assert main(["apply", str(path)]) == 0
    assert set(served_models(repo)) == {"people"}
    assert not (repo / "news_model").exists() and (repo / "ernie_tokenizer").exists()
    # A wrong sha256 stops apply before the repository changes.
    before = sorted(p.name for p in repo.iterdir())
    path.write_text(f"models:{models.replace(sha, 'b' * 64)}\n", encoding="utf-8")
    assert main(["apply", str(path)]) == 2
    assert sorted(p.name for p in repo.iterdir()) == before
