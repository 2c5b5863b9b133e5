"""The deployment file and `ernie-deploy apply`: a repository rebuilt from a list of named models."""

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
from ernie_deploy.repository.deployment import load_deployment
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
        ("convert", "{quantise: int8}", "models[0].convert.quantise: `ernie-deploy convert` has no such option"),
        ("convert", "{quantize: int4}", "models[0].convert.quantize: 'int4' is not one of none, int8"),
        ("convert", "{skip_parity: 1}", "models[0].convert.skip_parity: is a switch"),
        ("export", "{out: elsewhere}", "models[0].export.out: is set by apply"),
    ],
)
def test_stage_options_are_checked_against_the_command_before_any_work(tmp_path, capsys, stage, options, problem):
    path = _write(tmp_path, f"models: [{{name: a, task: seq_cls, source: bootstrap, {stage}: {options}}}]")
    assert main(["apply", str(path), "--dry-run"]) == 2
    err = capsys.readouterr()
    assert problem in err.err and "==>" not in err.out


def test_dry_run_prints_the_commands_and_runs_nothing(tmp_path, capsys, monkeypatch):
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
    assert f"ernie-deploy fetch https://example.org/n.tgz --sha256 {SHA} --task seq_cls --name news" in out
    assert "ernie-deploy fetch --bootstrap --task token_cls --name people --budget 5\n" in out
    assert "ernie-deploy export --task seq_cls --name news\n" in out
    assert "ernie-deploy convert --name news --quantize int8" in out
    assert "--name news --name people --runtime python --instances 2\n" in out
    assert not (tmp_path / "artifacts").exists() and not (tmp_path / "models").exists()


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
    path = _write(tmp_path, f"build: {{runtime: python}}\nmodels:{models}")
    assert main(["apply", str(path)]) == 0
    repo = tmp_path / "models"
    assert {name: task.name for name, task in served_models(repo).items()} == {
        "news": "seq_cls",
        "people": "token_cls",
    }
    assert main(["check", str(repo)]) == 0
    # The file drops `news`: apply removes it and its steps, and keeps the shared tokenizer `people` uses.
    path.write_text("build: {runtime: python}\nmodels:\n" + models.splitlines()[2] + "\n", encoding="utf-8")
    assert main(["apply", str(path)]) == 0
    assert set(served_models(repo)) == {"people"}
    assert not (repo / "news_model").exists() and (repo / "ernie_tokenizer").exists()
    # A wrong sha256 stops apply before the repository changes.
    before = sorted(p.name for p in repo.iterdir())
    path.write_text(f"models:{models.replace(sha, 'b' * 64)}\n", encoding="utf-8")
    assert main(["apply", str(path)]) == 2
    assert sorted(p.name for p in repo.iterdir()) == before
