"""The reference profile `build` records (repository/reference.py): in the record and as reference.json beside the
answering step's labels in every layout, from the dev split or a `--reference` file, for a new model and for a new
version; skipped by --no-monitor and said in one line where there are no texts; a bad file refused before anything
is written; and equal, bucket for bucket, to what the served model counts for the same texts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ernie_deploy.core import profile
from ernie_deploy.core.errors import BadDataError, BadOptionsError
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.serving.watch import REFERENCE_FILE
from tests.conftest import NEWS_TEXTS, artifacts

OPTIONS = BuildOptions(runtime="python", layout="fused")
SEQUENCE_SERIES = {profile.LABEL, profile.CONFIDENCE, profile.CHARS, profile.READING}


def _record(repo: Path, name: str):
    from ernie_deploy.repository.served import served_models

    return served_models(repo)[name]


def _reference_json(repo: Path, name: str, version: int = 1) -> dict:
    from ernie_deploy.core.tasks import TOKENIZER_STEP
    from ernie_deploy.repository.layouts import get_layout

    record = _record(repo, name)
    folder = repo / get_layout(record.layout).answering(record, TOKENIZER_STEP) / str(version)
    assert (folder / "labels.json").is_file(), f"{folder} is not the home of the labels"
    return json.loads((folder / REFERENCE_FILE).read_text(encoding="utf-8"))


def _check_shares(reference: dict, labels, series: set[str]) -> None:
    assert set(reference["shares"]) == series
    for name, shares in reference["shares"].items():
        assert set(shares) == set(profile.buckets(name, labels)), name  # every bucket
        assert abs(sum(shares.values()) - 1.0) < 1e-9, (name, shares)
        assert all(0.0 <= share <= 1.0 for share in shares.values())


@pytest.fixture
def news_file(tmp_path) -> Path:
    """A --reference file: the news texts, one per line, a blank line and CRLF endings among them."""
    path = tmp_path / "traffic.txt"
    lines = [*NEWS_TEXTS * 5, "", "体育" * 80]  # the last one past max_seq_len: read cut
    path.write_bytes("\r\n".join(lines).encode("utf-8") + b"\n")
    return path


@pytest.mark.parametrize("layout", ["ensemble", "fused", "graph-postprocess", "tokenizer-in-model"])
def test_record_and_reference_json_carry_the_dev_split_profile(layout, tiny_pipeline, thucnews, tmp_path):
    from ernie_deploy.repository.build import build

    logged = []
    build(artifacts(tiny_pipeline), tmp_path, BuildOptions(runtime="python", layout=layout), log=logged.append)
    record = _record(tmp_path, "ernie_seqcls")
    reference = record.reference
    assert reference["source"] == "dev split"
    assert reference["texts"] == 1000  # the news dev split's titles: all of them, within both bounds
    _check_shares(reference, record.labels, SEQUENCE_SERIES)
    assert _reference_json(tmp_path, "ernie_seqcls") == reference
    assert any("reference profile of 1,000 texts (dev split)" in line for line in logged), logged


def test_reference_file_is_used_and_counted(tiny_pipeline, news_file, tmp_path):
    from dataclasses import replace

    from ernie_deploy.repository.build import build

    build(artifacts(tiny_pipeline), tmp_path, replace(OPTIONS, reference_texts=str(news_file)))
    reference = _record(tmp_path, "ernie_seqcls").reference
    assert reference["source"] == news_file.name
    assert reference["texts"] == len(NEWS_TEXTS) * 5 + 1  # the blank line is no text
    assert reference["shares"][profile.READING]["cut"] == pytest.approx(1 / reference["texts"])
    assert _reference_json(tmp_path, "ernie_seqcls") == reference


def test_no_monitor_and_no_texts_record_none(tiny_pipeline, tmp_path):
    from ernie_deploy.pipeline.build import build_models

    build_models([artifacts(tiny_pipeline)], BuildOptions(runtime="python", monitor=False), tmp_path / "off")
    assert _record(tmp_path / "off", "ernie_seqcls").reference is None
    assert not list((tmp_path / "off").rglob(REFERENCE_FILE))
    # A model of the task trained on other data (other labels): the news dev split is not its own, and build says so.
    logged = []
    other = artifacts(tiny_pipeline, "mine", labels=tuple(f"class{i}" for i in range(10)))
    build_models([other], BuildOptions(runtime="python"), tmp_path / "mine", log=logged.append)
    assert _record(tmp_path / "mine", "mine").reference is None
    said = [line for line in logged if "reference" in line]
    assert len(said) == 1 and "no reference profile" in said[0] and "--reference FILE" in said[0], said


def test_version_gets_its_own_reference(tiny_pipeline, tiny_pipeline_v2, news_file, tmp_path):
    from dataclasses import replace

    from ernie_deploy.repository.add_version import build_version
    from ernie_deploy.repository.build import build

    build(artifacts(tiny_pipeline), tmp_path, OPTIONS)
    build_version(artifacts(tiny_pipeline_v2), tmp_path, replace(OPTIONS, reference_texts=str(news_file)), version=2)
    first, second = _reference_json(tmp_path, "ernie_seqcls", 1), _reference_json(tmp_path, "ernie_seqcls", 2)
    assert first["source"] == "dev split" and second["source"] == news_file.name
    _check_shares(second, tiny_pipeline_v2.static.spec.labels, SEQUENCE_SERIES)


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, what the refusal says)."""
    files = {
        "missing": (tmp_path / "nowhere.txt", None, "no such file"),
        "empty": (tmp_path / "empty.txt", b"\n \n", "holds no texts"),
        "not UTF-8": (tmp_path / "latin1.txt", "新闻\n".encode() + "caf\xe9\n".encode("latin-1"), "line 2: not UTF-8"),
        "too long": (tmp_path / "long.txt", ("新闻\n" + "股" * 101 + "\n").encode(), "line 2: a text of 101"),
        "too many": (tmp_path / "many.txt", "新闻\n".encode() * 1001, "1,001 texts"),
    }
    out = {}
    for name, (path, content, said) in files.items():
        if content is not None:
            path.write_bytes(content)
        out[name] = (path, said)
    huge = tmp_path / "huge.txt"  # refused by its size, before a byte of it is read
    with huge.open("wb") as f:
        f.truncate(16 * 1024 * 1024 + 1)
    out["too big"] = (huge, "16,777,217 bytes")
    return out


def test_bad_reference_files_are_refused_before_anything_is_written(tiny_pipeline, tmp_path):
    from dataclasses import replace

    from ernie_deploy.repository.build import build

    repo = tmp_path / "models"
    for name, (path, said) in _bad_files(tmp_path).items():
        options = replace(OPTIONS, reference_texts=str(path), max_text_chars=100)
        with pytest.raises(BadDataError) as caught:
            build(artifacts(tiny_pipeline), repo, options)
        assert said in caught.value.problem, (name, caught.value.problem)
        assert caught.value.fix, name
        assert not (repo / "ernie_seqcls").exists(), name
    # A pair model's line without its text_pair.
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("新闻\t股市\n新闻\n", encoding="utf-8")
    with pytest.raises(BadDataError, match="line 2: 1 tab-separated fields"):
        build(artifacts(tiny_pipeline, task="pair_cls"), repo, replace(OPTIONS, reference_texts=str(pairs)))
    # --reference with --no-monitor, or for two models at once.
    with pytest.raises(BadOptionsError, match="--no-monitor"):
        build(artifacts(tiny_pipeline), repo, replace(OPTIONS, reference_texts=str(pairs), monitor=False))
    with pytest.raises(BadOptionsError, match="one model's reference texts"):
        build(
            [artifacts(tiny_pipeline), artifacts(tiny_pipeline, "other")],
            repo,
            replace(OPTIONS, reference_texts=str(pairs)),
        )
    assert not repo.exists() or not any(repo.iterdir())


def test_cli_takes_reference_and_refuses_a_bad_one(tiny_pipeline, news_file, tmp_path, capsys):
    from ernie_deploy.cli import main

    repo = tmp_path / "models"
    base = ["build", "--static", str(tiny_pipeline.static.root), "--onnx", str(tiny_pipeline.onnx)]
    base += ["--repository", str(repo), "--runtime", "python"]
    assert main([*base, "--reference", str(news_file)]) == 0
    assert f"reference profile of {len(NEWS_TEXTS) * 5 + 1} texts ({news_file.name})" in capsys.readouterr().out
    assert _record(repo, "ernie_seqcls").reference["source"] == news_file.name
    assert main([*base, "--reference", str(tmp_path / "nowhere.txt")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "--reference FILE" in err and "Traceback" not in err


def _counted(repo: Path, name: str, entry, options: BuildOptions):
    """The record of served model `name`, its reference texts and their counts offline (count_profile), checked
    against the recorded shares: each share is its bucket's count over the series' total."""
    from ernie_deploy.repository.build import pad_token_id
    from ernie_deploy.repository.reference import count_profile, read_reference_file
    from ernie_deploy.repository.tokenizers import tokenizer_json

    record = _record(repo, name)
    texts = read_reference_file(options.reference_texts, record).texts
    counted = count_profile(
        record, entry.onnx, tokenizer_json(entry.vocab_file), pad_token_id(entry.vocab_file), texts
    ).counts
    for series, shares in record.reference["shares"].items():
        total = sum(n for (s, _), n in counted.items() if s == series)
        assert {b: round(share * total) for b, share in shares.items() if share} == {
            b: n for (s, b), n in counted.items() if s == series
        }, series
    return record, texts, counted


@pytest.mark.integration
def test_reference_counts_equal_what_the_served_model_counts(tiny_pipeline, tiny_token_pipeline, news_file, tmp_path):
    """The same texts, counted offline at build and by the served models (a classifier, and an NER model reading a
    long text in windows, each counted by its ensemble's postprocess step): the same count in every bucket; and the
    recorded shares on /metrics as the reference gauges."""
    from dataclasses import replace

    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.client.metrics import counter_name, scrape
    from ernie_deploy.core.tasks import SEQ_CLS, TOKEN_CLS
    from ernie_deploy.repository.build import build
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path / "models"
    people_file = tmp_path / "people.txt"
    people_file.write_text("\n".join([*NEWS_TEXTS * 3, "国足公布世预赛名单" * 30]), encoding="utf-8")
    models = {}
    for name, task, pipeline, texts_file in (
        ("news", SEQ_CLS, tiny_pipeline, news_file),
        ("people", TOKEN_CLS, tiny_token_pipeline, people_file),
    ):
        entry = artifacts(pipeline, name)
        options = replace(OPTIONS, layout="ensemble", reference_texts=str(texts_file))
        build(entry, repo, options)
        models[name] = (task, *_counted(repo, name, entry, options))
    assert models["people"][1].reference["shares"][profile.READING]["windows"] > 0  # the long text, in windows

    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:

        def counts(name: str) -> tuple[dict, list]:
            samples = [s for s in scrape(server.metrics_url) if s.labels.get("model") == name]
            return {
                (s.labels["series"], s.labels["bucket"]): int(s.value)
                for s in samples
                if counter_name(s.name) == counter_name(profile.PROFILE_METRIC)
            }, samples

        # What the server counted before the texts (its warmup requests at load), once it is all pushed: unchanged
        # over more than two of the step's once-a-second pushes.
        before = {name: counts(name)[0] for name in models}
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            time.sleep(2.5)
            now = {name: counts(name)[0] for name in models}
            if now == before:
                break
            before = now
        for name, (task, _, texts, _) in models.items():
            with Client(task, server.grpc_url, model=name) as client:
                for at in range(0, len(texts), 32):
                    client.infer(texts[at : at + 32])
        for name, (_, record, texts, counted) in models.items():
            deadline = time.monotonic() + 10.0
            while True:
                after, samples = counts(name)
                served = {k: n - before[name].get(k, 0) for k, n in after.items() if n - before[name].get(k, 0)}
                chars = sum(n for (series, _), n in served.items() if series == profile.CHARS)
                if chars >= len(texts) or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            assert served == counted, name
            gauges = {
                (s.labels["series"], s.labels["bucket"]): s.value
                for s in samples
                if s.name == profile.REFERENCE_METRIC and s.labels.get("version") == "1"
            }
            recorded = {(series, b): v for series, by in record.reference["shares"].items() for b, v in by.items()}
            assert gauges.keys() == recorded.keys(), name
            assert all(abs(gauges[k] - recorded[k]) < 1e-6 for k in recorded), name
