"""UIE checkpoints through export_uie and convert_uie_checked: recognised by the class their config names, exported
with the project's two inputs and two probability outputs, converted to ONNX, and gated on Paddle/ONNX parity.

The checkpoints are paddlenlp's own UIE class over ERNIE 3.0's real shapes (fetch.shapes), random weights, saved
with save_pretrained (model hubs are out of reach here). Measured here (2 cores, shared host), make + export +
convert + parity per shape: nano 10-13 s, mini 9-12 s, medium 22-31 s, base 37-46 s; the module in 85-120 s.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core.errors import BadCheckpointError, ParityError
from ernie_deploy.core.tasks import MODEL_INPUTS
from ernie_deploy.export import uie
from ernie_deploy.export.static import StaticModel
from ernie_deploy.export.uie import (
    OUTPUTS,
    PARITY_EXAMPLES,
    TOLERANCE,
    check_uie_parity,
    convert_uie_checked,
    export_uie,
)
from ernie_deploy.fetch.uie import inspect_uie

from .conftest import make_tiny_checkpoint
from .test_real_shapes import real_vocab

SHAPES = ("nano", "mini", "medium", "base")


def make_uie(out: Path, shape: str, seed: int = 3):
    """A save_pretrained UIE checkpoint of an ERNIE 3.0 shape with random weights, its heads calibrated
    (calibrate_heads); returns the model too."""
    import paddle
    from paddlenlp.transformers import UIE, ErnieConfig, ErnieTokenizer

    from ernie_deploy.fetch.shapes import get_shape, shape_config

    config = ErnieConfig(**shape_config(get_shape(shape)))
    paddle.seed(seed)
    model = UIE(config)
    model.eval()
    out.mkdir(parents=True)
    (out / "vocab.txt").write_text("\n".join(real_vocab(config.vocab_size)) + "\n", encoding="utf-8")
    calibrate_heads(model, ErnieTokenizer(str(out / "vocab.txt")))
    model.save_pretrained(str(out))
    ErnieTokenizer(str(out / "vocab.txt")).save_pretrained(str(out))
    return model


# The share of (prompt, text) tokens whose start, and whose end, a calibrated head puts past 0.5 (test_spans' texts).
START_SHARE, END_SHARE = 0.4, 0.15


def calibrate_heads(model, tokenizer) -> None:
    """Heads that find spans of one and of several characters at every shape: each head's weights scaled by 10 (a
    random head gives every token about 0.5, where the last digits decide), then biased so that START_SHARE and
    END_SHARE of the tokens of test_spans' texts under its entity prompts pass 0.5, the threshold halfway between two
    neighbouring logits (random shapes differ by several logits: one fixed bias finds no end at nano)."""
    import paddle

    from .test_spans import ENTITY_SCHEMA, TEXTS

    for head in (model.linear_start, model.linear_end):
        head.weight.set_value(head.weight * 10.0)
        head.bias.set_value(paddle.zeros_like(head.bias))
    rows = [tokenizer(text=prompt, text_pair=text) for text in TEXTS for prompt in ENTITY_SCHEMA]
    logits = [[], []]
    with paddle.no_grad():
        for row in rows:
            probs = model(
                paddle.to_tensor([row["input_ids"]]), token_type_ids=paddle.to_tensor([row["token_type_ids"]])
            )
            for kept, p in zip(logits, probs):
                p = np.clip(p.numpy()[0].astype(np.float64), 1e-12, 1 - 1e-12)
                kept.extend(np.log(p / (1 - p)))
    for head, values, share in zip((model.linear_start, model.linear_end), logits, (START_SHARE, END_SHARE)):
        ordered = np.sort(values)
        k = int(len(ordered) * (1 - share))
        head.bias.set_value(paddle.full_like(head.bias, -(ordered[k - 1] + ordered[k]) / 2))


def dygraph_probs(model, vocab: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """paddlenlp's forward pass on PARITY_EXAMPLES as ErnieTokenizer encodes them, one row at a time."""
    import paddle
    from paddlenlp.transformers import ErnieTokenizer

    tokenizer = ErnieTokenizer(str(vocab))
    rows = [tokenizer(prompt, text) for prompt, text in PARITY_EXAMPLES]
    probs = []
    with paddle.no_grad():
        for row in rows:
            ids, types = (paddle.to_tensor([row[k]], dtype="int64") for k in MODEL_INPUTS)
            probs.append(np.stack([p.numpy()[0] for p in model(ids, token_type_ids=types)]))
    return probs, rows


@pytest.fixture(scope="module")
def nano(tmp_path_factory) -> StaticModel:
    root = tmp_path_factory.mktemp("uie_nano")
    make_uie(root / "checkpoint", "nano")
    return export_uie(inspect_uie(root / "checkpoint"), root / "static")


@pytest.mark.parametrize("shape", SHAPES)
def test_uie_checkpoint_exports_converts_and_passes_parity(shape, tmp_path, capsys):
    started = time.perf_counter()
    model = make_uie(tmp_path / "checkpoint", shape)
    checkpoint = inspect_uie(tmp_path / "checkpoint")
    static = export_uie(checkpoint, tmp_path / "static")
    exported = time.perf_counter()
    report = convert_uie_checked(static, tmp_path / "onnx" / "model.onnx", log=lambda _: None)
    finished = time.perf_counter()

    assert report.ok and report.n == len(PARITY_EXAMPLES) and report.spans_agree == 1.0
    assert set(report.max_abs_diff) == set(OUTPUTS) and report.worst <= TOLERANCE
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == ["model.json", "model.onnx", "parity.json"]
    assert json.loads((tmp_path / "onnx" / "parity.json").read_text())["ok"] is True

    # The ONNX signature: the project's two inputs, the two heads by name, [batch, seq] each.
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert sorted(i.name for i in session.get_inputs()) == sorted(MODEL_INPUTS)
    assert [i.type for i in session.get_inputs()] == ["tensor(int64)"] * 2
    assert [o.name for o in session.get_outputs()] == list(OUTPUTS)
    assert all(o.type == "tensor(float)" and len(o.shape) == 2 for o in session.get_outputs())

    # The static model answers paddlenlp's forward pass, start then end (the order the ONNX outputs are named by).
    probs, rows = dygraph_probs(model, static.vocab_file)
    run = uie.static_runner(static)
    for row, expected in zip(rows, probs):
        got = run(*(np.array([row[k]], dtype=np.int64) for k in MODEL_INPUTS))
        assert [a.dtype for a in got] == [np.float32] * 2
        np.testing.assert_allclose(np.stack([a[0] for a in got]), expected, atol=1e-5)
    # Served: the step `build` makes of it answers an entity and a relation schema as Taskflow reads the model.
    compared = served_answers_as_taskflow(model, static, tmp_path / "onnx" / "model.onnx", tmp_path / "models")
    with capsys.disabled():
        print(
            f"\nUIE {shape}: {report.summary()}; export {exported - started:.1f} s, "
            f"convert + parity {finished - exported:.1f} s; {compared} served spans as Taskflow's"
        )


def served_answers_as_taskflow(model, static: StaticModel, onnx: Path, repository: Path) -> int:
    """Build the converted model (fused, as served) and run its step in process on test_spans' texts with its entity
    and relation schemas; each answer must hold the spans Taskflow's rules read from the Paddle model. Returns the
    spans compared."""
    from google.protobuf.json_format import MessageToDict
    from paddlenlp.transformers import ErnieTokenizer

    from ernie_deploy.kinds.uie.serving import ExtractionStep
    from ernie_deploy.repository.build import BuildOptions, ModelArtifacts, build
    from ernie_deploy.repository.configs import parse

    from .test_spans import ENTITY_SCHEMA, RELATION_SCHEMA, TEXTS, compared_with_taskflow

    build(ModelArtifacts(static.spec, onnx, static.vocab_file), repository, BuildOptions(runtime="python"))
    folder = repository / static.spec.name
    config = MessageToDict(parse((folder / "config.pbtxt").read_text()), preserving_proto_field_name=True)
    step = ExtractionStep(config, folder / "1")
    tokenizer = ErnieTokenizer(str(static.vocab_file))
    compared = 0
    for schema in (ENTITY_SCHEMA, RELATION_SCHEMA):
        sent = np.array([json.dumps(schema, ensure_ascii=False).encode()] * len(TEXTS), dtype=np.object_)
        out = step({"text": np.array([t.encode() for t in TEXTS], dtype=np.object_)[:, None], "schema": sent[:, None]})
        answers = [json.loads(item) for item in out["result"].reshape(-1)]
        compared += compared_with_taskflow(model, tokenizer, TEXTS, answers, schema)
    assert compared >= 8
    return compared


def test_a_sequence_classifier_is_refused_by_name(tmp_path):
    make_tiny_checkpoint(tmp_path / "classifier")
    with pytest.raises(BadCheckpointError) as refused:
        inspect_uie(tmp_path / "classifier")
    assert "ErnieForSequenceClassification" in refused.value.problem and "not UIE" in refused.value.problem
    assert "paddlenlp.transformers.UIE" in refused.value.fix


def test_a_config_that_names_no_class_is_refused(nano, tmp_path):
    folder = tmp_path / "unnamed"
    shutil.copytree(nano.root.parent / "checkpoint", folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("architectures")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(BadCheckpointError, match="no architectures"):
        inspect_uie(folder)


def test_the_static_model_is_refused_as_a_checkpoint(nano):
    with pytest.raises(BadCheckpointError, match="static model"):
        inspect_uie(nano.root)


def _refused_leaves_nothing(static: StaticModel, out: Path, **options) -> ParityError:
    """A refused conversion: ParityError, and the folder holds what it held before (a previous model, unchanged)."""
    out.parent.mkdir(parents=True)
    out.write_bytes(b"previous model")
    with pytest.raises(ParityError) as refused:
        convert_uie_checked(static, out, log=lambda _: None, **options)
    assert [p.name for p in out.parent.iterdir()] == [out.name] and out.read_bytes() == b"previous model"
    return refused.value


def test_swapped_heads_fail_parity_and_leave_nothing(nano, tmp_path, monkeypatch):
    name_outputs = uie._name_outputs

    def swapped(model, source):  # a wrong graph: the end head answers as start_prob and the start head as end_prob
        outputs = [copy.deepcopy(o) for o in model.graph.output]
        del model.graph.output[:]
        model.graph.output.extend(reversed(outputs))
        name_outputs(model, source)

    monkeypatch.setattr(uie, "_name_outputs", swapped)
    refused = _refused_leaves_nothing(nano, tmp_path / "onnx" / "model.onnx")
    assert "disagree" in refused.problem


def test_an_absurd_tolerance_fails_parity_and_leaves_nothing(nano, tmp_path):
    refused = _refused_leaves_nothing(nano, tmp_path / "onnx" / "model.onnx", tolerance=-1.0)
    assert "tolerance -1" in refused.problem


def test_parity_compares_real_tokens_of_every_row(nano, tmp_path):
    onnx_path = uie.convert_uie(nano, tmp_path / "model.onnx")
    short = [("人名", "李白")]
    report = check_uie_parity(nano, onnx_path, [*short, *PARITY_EXAMPLES])
    assert report.n == len(PARITY_EXAMPLES) + 1 and report.ok
