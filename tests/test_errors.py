"""The failures a library caller handles differently raise different ErnieDeployError subclasses: each provoked
here through the call that meets it, told apart by type, and still an ErnieDeployError whose message names the fix."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core import errors
from ernie_deploy.core.errors import (
    AccuracyGateError,
    BadCheckpointError,
    BadDataError,
    BadOptionsError,
    BadRepositoryError,
    BadRequest,
    DownloadError,
    ErnieDeployError,
    FailedRequestsError,
    InputLimitError,
    InstallError,
    ParityError,
    ServerNotReadyError,
)
from ernie_deploy.core.spec import FORMAT, ModelSpec
from ernie_deploy.serving.limits import TextLimits
from ernie_deploy.serving.texts import decode_inputs, decode_texts

SUBCLASSES = [
    AccuracyGateError,
    BadCheckpointError,
    BadDataError,
    BadOptionsError,
    BadRepositoryError,
    DownloadError,
    FailedRequestsError,
    InputLimitError,
    InstallError,
    ParityError,
    ServerNotReadyError,
]
LIMITS = TextLimits(max_text_chars=10, max_request_chars=16)


def texts(*items: str) -> np.ndarray:
    return np.array([t.encode("utf-8") for t in items], dtype=np.object_).reshape(-1, 1)


def closed_port() -> int:
    from ernie_deploy.server.preflight import free_ports

    return free_ports(1)[0]  # free a moment ago, and nothing listens there


def assert_names_fix(exc: ErnieDeployError) -> None:
    assert isinstance(exc, ErnieDeployError) and exc.fix and f"fix: {exc.fix}" in str(exc)


def test_each_is_an_ernie_deploy_error_with_its_problem_and_fix():
    assert set(errors.__all__) == {c.__name__ for c in [*SUBCLASSES, ErnieDeployError, BadRequest]}
    for cls in SUBCLASSES:
        exc = cls("the problem", "the fix")
        assert isinstance(exc, ErnieDeployError) and cls.__doc__
        assert (exc.problem, exc.fix, str(exc)) == ("the problem", "the fix", "the problem\n  fix: the fix")
    # One failure, one class: no subclass is another's, but an input limit is a bad request (served INVALID_ARG).
    for a in SUBCLASSES:
        for b in SUBCLASSES:
            assert issubclass(a, b) == (a is b)
    assert issubclass(InputLimitError, BadRequest) and not issubclass(BadRequest, InputLimitError)


def test_a_text_past_its_limit_is_an_input_limit():
    with pytest.raises(InputLimitError, match="over this model's limit of 10") as caught:
        decode_texts(texts("short", "x" * 11), limits=LIMITS)
    assert isinstance(caught.value, BadRequest)
    assert_names_fix(caught.value)


def test_a_request_past_its_limit_is_an_input_limit():
    with pytest.raises(InputLimitError, match="max_request_chars") as caught:
        decode_inputs({"text": texts("x" * 9, "y" * 9)}, ["text"], LIMITS)
    assert_names_fix(caught.value)


def test_a_bad_text_beside_a_long_one_is_a_plain_bad_request():
    # Splitting the long text would not make the request good: the caller is told it is not (only) the limit.
    with pytest.raises(BadRequest) as caught:
        decode_inputs({"text": texts("x" * 11, " ")}, ["text"], LIMITS)
    assert not isinstance(caught.value, InputLimitError)
    assert "text 0 has 11 characters" in str(caught.value) and "text 1 is empty" in str(caught.value)


def test_check_on_a_broken_repository_is_a_bad_repository(tmp_path, capsys):
    from ernie_deploy.cli.check import run
    from ernie_deploy.repository.check import check_repository

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.pbtxt").write_text("this is { not a model config")
    with pytest.raises(BadRepositoryError, match=r"problem\(s\) in") as caught:
        run(argparse.Namespace(repository=str(tmp_path)))
    assert "broken" in capsys.readouterr().out
    assert_names_fix(caught.value)
    with pytest.raises(BadRepositoryError, match="is not a directory"):
        check_repository(tmp_path / "broken" / "config.pbtxt")


def test_a_model_record_of_an_unknown_format_is_a_bad_repository(tmp_path):
    record = {"format": FORMAT + 1, "name": "news", "task": "seq_cls", "labels": ["a", "b"], "max_seq_len": 128}
    with pytest.raises(BadRepositoryError, match=f"record format {FORMAT + 1}") as caught:
        ModelSpec.from_dict(record)
    assert_names_fix(caught.value)
    with pytest.raises(BadRepositoryError, match="holds no model.json"):
        ModelSpec.read(tmp_path)


def test_no_server_at_a_closed_port_is_not_ready():
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.core.tasks import get_task
    from ernie_deploy.server.stats import loaded_stats

    port = closed_port()
    with pytest.raises(ServerNotReadyError, match="cannot read statistics") as caught:
        loaded_stats(f"http://127.0.0.1:{port}", timeout=2)
    assert_names_fix(caught.value)
    with Client(get_task("seq_cls"), f"127.0.0.1:{port}", timeout_s=2) as client:
        with pytest.raises(ServerNotReadyError, match="no Triton server answers") as caught:
            client.check_ready()
    assert_names_fix(caught.value)


def test_a_load_the_server_finds_in_none_of_its_folders_is_a_bad_repository():
    """Triton says so only in words: RepositoryAdmin reads them once, and rollout catches the type."""
    from tritonclient.utils import InferenceServerException

    from ernie_deploy.client.admin import RepositoryAdmin

    admin = RepositoryAdmin(f"127.0.0.1:{closed_port()}", timeout=2)
    missing = InferenceServerException("failed to load 'news_canary', failed to poll from model repository")
    assert isinstance(admin._error("load news_canary", missing), BadRepositoryError)
    assert type(admin._error("load news_canary", InferenceServerException("Socket closed"))) is ServerNotReadyError


def test_paddle_and_onnx_outputs_that_differ_fail_parity():
    from ernie_deploy.export.drift import DriftReport, require_drift
    from ernie_deploy.export.onnx import ParityReport, require_parity

    paddle = np.array([[2.0, -1.0], [0.5, 0.4]], dtype=np.float32)
    onnx = np.array([[2.0, -1.0], [0.4, 0.5]], dtype=np.float32)  # the second text's label flips
    report = ParityReport(
        n=len(paddle),
        max_abs_diff=float(np.max(np.abs(paddle - onnx))),
        labels_agree=float(np.mean(paddle.argmax(-1) == onnx.argmax(-1))),
        tolerance=1e-4,
    )
    with pytest.raises(ParityError, match="Paddle and ONNX disagree") as caught:
        require_parity(report, Path("model.onnx"))
    assert_names_fix(caught.value)
    drift = DriftReport("fp16", n=2, labels_agree=0.5, max_abs_diff=0.1, tolerance=0.05, min_labels_agree=0.99)
    with pytest.raises(ParityError, match="drifts from FP32") as caught:
        require_drift(drift, Path("model.onnx"))
    assert_names_fix(caught.value)
    require_parity(ParityReport(2, 0.0, 1.0, 1e-4), Path("model.onnx"))  # equal outputs pass


def test_a_score_below_its_floor_fails_the_accuracy_gate():
    from ernie_deploy.export.gates import require_at_least

    with pytest.raises(AccuracyGateError, match="below the gate's 0.8100") as caught:
        require_at_least(0.809, 0.81, "the served seq_cls model's accuracy", n=1000)
    assert_names_fix(caught.value)
    require_at_least(0.81, 0.81, "the served seq_cls model's accuracy", n=1000)


def test_bad_options_are_told_apart_from_a_bad_checkpoint_or_data(tmp_path):
    from ernie_deploy.core.tasks import get_task
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint
    from ernie_deploy.fetch.data import read_split_file
    from ernie_deploy.repository.options import BuildOptions, check_options

    with pytest.raises(BadOptionsError, match="unknown task"):
        get_task("no_such_task")
    with pytest.raises(BadOptionsError, match="unknown runtime"):
        check_options(BuildOptions(runtime="no_such_runtime"))
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(BadCheckpointError, match="no checkpoint layout recognized") as caught:
        inspect_checkpoint(tmp_path / "ckpt")
    assert_names_fix(caught.value)
    (tmp_path / "dev.tsv").write_text("not a header\n")
    with pytest.raises(BadDataError, match="header") as caught:
        read_split_file(tmp_path / "dev.tsv")
    assert_names_fix(caught.value)


def test_a_download_that_does_not_match_its_pin_is_a_download_error(tmp_path):
    from ernie_deploy.fetch.downloads import verify_sha256

    path = tmp_path / "archive.tar.gz"
    path.write_bytes(b"not the pinned release")
    with pytest.raises(DownloadError, match="sha256 mismatch") as caught:
        verify_sha256(path, "0" * 64)
    assert_names_fix(caught.value)


def test_a_failure_named_with_its_place_in_a_deployment_file_keeps_its_type():
    from ernie_deploy.pipeline.options import FetchOptions

    with pytest.raises(
        BadOptionsError, match=r"models\[0\]\.fetch: --budget is about training a --bootstrap model"
    ) as caught:
        FetchOptions.from_mapping({"budget": 5}, "models[0].fetch")
    assert_names_fix(caught.value)


@pytest.mark.integration
def test_a_served_score_below_the_clients_gate_is_an_accuracy_gate_failure(tiny_pipeline, tmp_path, capsys):
    """`clients/*_grpc_client.py --min-score X`: the split scored through a real server, exit 3 with the score and
    the gate named when it falls short, exit 0 when it does not."""
    from ernie_deploy.core.tasks import SEQ_CLS
    from ernie_deploy.evaluate.served import main as client_main
    from ernie_deploy.repository.build import ModelArtifacts, build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    p = tiny_pipeline
    build(
        ModelArtifacts(p.static.spec, p.onnx, p.static.vocab_file),
        tmp_path / "models",
        BuildOptions(runtime="python", layout="ensemble"),
    )
    split = tmp_path / "test.tsv"
    labels = list(p.static.spec.labels)
    split.write_text("label\ttext\n" + "".join(f"{labels[i % 3]}\t新闻{i}\n" for i in range(6)), encoding="utf-8")
    with TritonServer(tmp_path / "models", http_port=0, grpc_port=0, metrics_port=0) as server:
        argv = ["--grpc-url", server.grpc_url, "--data", str(split)]
        assert client_main(SEQ_CLS, [*argv, "--min-score", "1.01"]) == 3
        err = capsys.readouterr().err
        assert "below the gate's 1.0100" in err and "accuracy" in err and "fix:" in err
        assert client_main(SEQ_CLS, [*argv, "--min-score", "0"]) == 0
