"""An extraction model (UIE) through every stage on a real server: a PaddleNLP UIE checkpoint (ERNIE 3.0 nano shape,
random weights, heads biased so that spans are found) exported, converted under the parity gate and built with
the commands users run, then asked over gRPC. Its answers must be what Taskflow's rules read from the Paddle model
for the same texts, schemas and checkpoint (tests/test_spans.reference_spans), and bad requests must fail alone, by
name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.serving.schema import MAX_REQUEST_ROWS

from .test_spans import ENTITY_SCHEMA, RELATION_SCHEMA, TEXTS, biased_uie, compared_with_taskflow

NAME = "uie_nano"
LONG = "王五在上海的腾讯公司工作。" * 20  # 260 characters: three rows of 128 tokens for each type


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(model, paddlenlp tokenizer, repository, artifacts): the checkpoint through export, convert and build."""
    from ernie_deploy.cli import main

    root = tmp_path_factory.mktemp("uie_served")
    names = (*ENTITY_SCHEMA, *RELATION_SCHEMA["人物"], "的类型")
    model, paddle_tok, _ = biased_uie(root / "checkpoint", texts=[*TEXTS, LONG], names=names)
    artifacts = root / "artifacts"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(artifacts))
        # Rows of 128 tokens, which LONG's windows and the row limit below are counted in (a UIE's default is 512).
        exported = ["export", "--task", "uie", "--model", NAME, "--checkpoint", str(root / "checkpoint")]
        assert main([*exported, "--max-seq-len", "128"]) == 0
        assert main(["convert", "--model", NAME]) == 0
        schema = json.dumps(ENTITY_SCHEMA, ensure_ascii=False)
        reference = root / "reference.txt"
        reference.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
        argv = ["build", "--model", NAME, "-r", str(root / "models"), "--runtime", "python", "--schema", schema]
        assert main([*argv, "--reference", str(reference)]) == 0
    return model, paddle_tok, root / "models", artifacts


@pytest.fixture(scope="module")
def server(built):
    from ernie_deploy.server.process import TritonServer

    server = TritonServer(built[2], http_port=0, grpc_port=0, metrics_port=0, log_file=built[2].parent / "server.log")
    server.start(timeout=180)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(server.grpc_url)


def ask(client, texts, schemas=None):
    """One request: each text with its schema (one given: the same for every text; none: the built one)."""
    import tritonclient.grpc as grpcclient

    def tensor(name, values):
        array = np.array([v.encode("utf-8") for v in values], dtype=np.object_).reshape(-1, 1)
        t = grpcclient.InferInput(name, list(array.shape), "BYTES")
        t.set_data_from_numpy(array)
        return t

    inputs = [tensor("text", texts)]
    if schemas is not None:
        schemas = schemas * len(texts) if len(schemas) == 1 else schemas
        inputs.append(
            tensor("schema", [s if isinstance(s, str) else json.dumps(s, ensure_ascii=False) for s in schemas])
        )
    result = client.infer(NAME, inputs, outputs=[grpcclient.InferRequestedOutput("result")])
    return [json.loads(item) for item in result.as_numpy("result").reshape(-1)]


def test_every_stage_writes_the_record(built):
    _, _, repo, artifacts = built
    record = ModelSpec.read(repo / NAME / "1")
    assert (record.task, record.layout, record.long_text) == ("uie", "fused", "window")
    assert record.schema == ENTITY_SCHEMA and record.position_prob == 0.5
    parity = json.loads((artifacts / "onnx" / NAME / "parity.json").read_text())
    assert parity["ok"] and max(parity["max_abs_diff"].values()) < 1e-5


def test_entity_schema_answers_as_taskflow_reads_the_paddle_model(built, client):
    model, paddle_tok, _, _ = built
    answers = ask(client, TEXTS)  # no schema sent: the one built in
    assert compared_with_taskflow(model, paddle_tok, TEXTS, answers, ENTITY_SCHEMA) >= 8


def test_relation_schema_answers_as_taskflow_reads_the_paddle_model(built, client):
    model, paddle_tok, _, _ = built
    answers = ask(client, TEXTS, [RELATION_SCHEMA])
    assert compared_with_taskflow(model, paddle_tok, TEXTS, answers, RELATION_SCHEMA) >= 16


def test_each_text_its_own_schema_in_one_request(built, client):
    both = ask(client, TEXTS, [["人物"], ["公司"]])
    alone = [ask(client, [TEXTS[0]], [["人物"]])[0], ask(client, [TEXTS[1]], [["公司"]])[0]]
    assert both == alone and set(both[0]) <= {"人物"} and set(both[1]) <= {"公司"}


def test_a_long_text_is_read_in_windows_and_mapped_to_its_characters(built, client):
    answer = ask(client, [LONG], [["人物"]])[0]
    spans = answer.get("人物", [])
    assert spans and max(s["end"] for s in spans) > 200  # spans found past the first window
    for span in spans:
        assert LONG[span["start"] : span["end"]] == span["text"]
    assert len({(s["start"], s["end"]) for s in spans}) == len(spans)  # a span two windows find is answered once


def test_rows_of_different_lengths_run_in_buckets_and_answer_as_each_alone(built, client):
    """A long text's windows and short texts in one request: served, each text answers as it does alone; in the
    step the server runs, the rows go in length buckets, so the calls pad within serving.buckets.MAX_PAD where one
    call would pad every row to a full window."""
    from benchmarks.scores_in_process import step_config
    from ernie_deploy.kinds.uie.serving import ExtractionStep
    from ernie_deploy.serving.buckets import MAX_PAD, Padding
    from ernie_deploy.serving.spans import prompt_rows

    texts = [TEXTS[0], LONG, TEXTS[1][:6], TEXTS[1]]
    assert ask(client, texts) == [ask(client, [text])[0] for text in texts]

    repo = built[2]
    step = ExtractionStep(step_config(repo / NAME), repo / NAME / "1")
    step({"text": np.array([[t.encode("utf-8")] for t in texts], dtype=np.object_)})
    assert step.padding.real > 0
    assert step.padding.ratio <= MAX_PAD
    rows = prompt_rows(step.tokenizer, texts, ENTITY_SCHEMA, max_seq_len=step.row_tokens, stride=step.stride)
    assert Padding.of(rows.lengths, [np.arange(len(rows))]).ratio > 1.5  # what one call of every row would pad


@pytest.mark.parametrize(
    "schema, says",
    [
        ("[人物", "is not JSON"),
        ('[""]', "empty type"),
        ("42", "not a name, list or dict"),
        (json.dumps([f"类型{i}" for i in range(65)], ensure_ascii=False), "more than the 64"),
    ],
)
def test_a_bad_schema_is_refused_by_name(built, client, schema, says):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match=says):
        ask(client, TEXTS[:1], [schema])
    assert ask(client, TEXTS[:1])  # the model is still up


def test_a_request_past_its_rows_is_refused_by_name(built, client):
    """Texts x types x windows: LONG is 4 windows per type of 3 prompt tokens, so 60 types cost 240 rows a text."""
    from tritonclient.utils import InferenceServerException

    many = [f"类型{i}" for i in range(60)]
    assert 2 * 60 * 4 <= MAX_REQUEST_ROWS < 3 * 60 * 4
    with pytest.raises(InferenceServerException, match=f"720 model rows .* more than the {MAX_REQUEST_ROWS} one"):
        ask(client, [LONG] * 3, [many])
    assert len(ask(client, [LONG] * 2, [many])) == 2


def test_layouts_that_run_each_step_once_are_refused_by_name(built, tmp_path, capsys):
    from ernie_deploy.cli import main

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(built[3]))
        for layout in ("ensemble", "tokenizer-in-model", "graph-postprocess"):
            argv = ["build", "--model", NAME, "-r", str(tmp_path / layout), "--runtime", "python"]
            assert main([*argv, "--layout", layout]) != 0
            assert "runs its model again for each stage" in capsys.readouterr().err
            assert not (tmp_path / layout / NAME).exists()


def test_answer_series_count_span_types_spans_per_text_and_probabilities(built, server, client):
    import urllib.request

    from ernie_deploy.client.metrics import parse

    record = ModelSpec.read(built[2] / NAME / "1")
    shares = record.reference["shares"]  # recorded at build on the --reference texts, as the served step counts
    assert {"span_type", "spans_per_text", "confidence"} <= set(shares) and record.reference["texts"] == len(TEXTS)

    def counts() -> dict:
        with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
            samples = parse(response.read().decode("utf-8"))
        return {
            (s.labels["series"], s.labels["bucket"]): s.value
            for s in samples
            if s.name.startswith("ernie_deploy_profile") and s.labels.get("model") == NAME
        }

    import time

    from ernie_deploy.serving.metrics import PUSH_INTERVAL_S

    time.sleep(3 * PUSH_INTERVAL_S)  # what earlier tests asked is pushed before the count starts
    before = counts()
    answers = ask(client, TEXTS, [ENTITY_SCHEMA])
    spans = [(kind, s) for answer in answers for kind, found in answer.items() for s in found]
    time.sleep(3 * PUSH_INTERVAL_S)  # the step pushes its counts once a push interval
    after = counts()
    added = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    for kind in ENTITY_SCHEMA:
        assert added.get(("span_type", kind), 0) == sum(1 for k, _ in spans if k == kind)
    assert sum(v for (series, _), v in added.items() if series == "spans_per_text") == len(TEXTS)
    assert sum(v for (series, _), v in added.items() if series == "confidence") == len(spans) > 0


def test_versions_roll_out_and_back(built, tmp_path, capsys):
    """A second version (here: two instances) beside the first; rollout and rollback move what serves. The schema
    and the span threshold are the model's, in its one config: a version with others is refused by name."""
    import shutil

    import tritonclient.grpc as grpcclient

    from ernie_deploy.cli import main
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path / "models"
    shutil.copytree(built[2], repo)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(built[3]))
        schema = json.dumps(ENTITY_SCHEMA, ensure_ascii=False)
        argv = ["build", "--model", NAME, "-r", str(repo), "--version", "2", "--schema", schema]
        assert main([*argv, "--position-prob", "0.9"]) != 0
        assert "does not fit uie_nano's config" in capsys.readouterr().err
        assert main([*argv, "--instances", "2"]) == 0
    assert ModelSpec.read(repo / NAME / "2").serving.instances == 2
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        first = ask(client, TEXTS)
        control = ["--model", NAME, "--repository", str(repo), "--grpc-url", server.grpc_url]
        for command, version in ((["rollout", "--to", "2"], 2), (["rollback"], 1)):
            assert main([*command, *control]) == 0
            capsys.readouterr()
            assert main(["check", "--repository", str(repo)]) == 0
            assert f"{NAME}: serving version {version}" in capsys.readouterr().out
            assert ask(client, TEXTS) == first


def test_the_front_door_adds_a_uie_checkpoint_of_ones_own(built, tmp_path, capsys):
    """`ernie-deploy add` (scripts/convert.sh --model): a UIE folder becomes a served model beside the others, and the
    printed client command names the extraction client."""
    from ernie_deploy.cli import main

    checkpoint = built[2].parent / "checkpoint"
    repo = tmp_path / "models"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(tmp_path / "artifacts"))
        argv = ["add", "--task", "uie", "--model", "my_uie", "--source", str(checkpoint), "--repository", str(repo)]
        assert main([*argv, "--runtime", "python"]) == 0
        assert "uie_grpc_client.py" in capsys.readouterr().out
        wrong = ["add", "--task", "token_cls", "--model", "not_uie", "--source", str(checkpoint)]
        assert main([*wrong, "--repository", str(repo), "--runtime", "python"]) != 0
        assert "--task uie" in capsys.readouterr().err
    record = ModelSpec.read(repo / "my_uie" / "1")
    assert (record.task, record.layout, record.schema) == ("uie", "fused", None)


def test_probe_and_stats_read_an_extraction_model(built, server, capsys):
    """The liveness probe sends a text and, beside it, the schema's example; `stats` shows the model and its series."""
    from ernie_deploy.cli import main

    assert main(["probe", "--http-url", server.http_url]) == 0
    assert NAME in capsys.readouterr().out
    stats = ["stats", "--http-url", server.http_url, "--metrics-url", server.metrics_url]
    assert main([*stats, "--repository", str(built[2])]) == 0
    out = capsys.readouterr().out
    assert f"{NAME}: serving version 1" in out and "span_type" in out


def test_a_static_uie_model_goes_through_every_stage(built, tmp_path):
    """A Paddle inference model of a UIE (what `export` writes, or a static model from elsewhere) is exported through
    as it is, converted under the parity gate and built; with no trained types beside it, it takes each request's
    schema, or one built in."""
    from ernie_deploy.cli import main

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(tmp_path / "artifacts"))
        static = built[3] / "static" / NAME
        assert main(["export", "--task", "uie", "--model", "from_static", "--checkpoint", str(static)]) == 0
        assert main(["convert", "--model", "from_static"]) == 0
        argv = ["build", "--model", "from_static", "-r", str(tmp_path / "models"), "--runtime", "python"]
        assert main([*argv, "--schema", '["人物"]']) == 0
    record = ModelSpec.read(tmp_path / "models" / "from_static" / "1")
    assert (record.task, record.schema, record.labels) == ("uie", ["人物"], ("人物",))
