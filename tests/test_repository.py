"""Generated Triton configs: typed, round-trippable, derived from the ONNX signature, and what is checked in."""

from __future__ import annotations

import json
from dataclasses import replace

import onnx
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.profile import WATCHED_MODEL_PARAMETER
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS, SEQ_CLS, TOKEN_CLS, TOKENIZER_STEP
from ernie_deploy.repository.build import ModelArtifacts, build
from ernie_deploy.repository.configs import parse, render
from ernie_deploy.repository.layouts import task_configs
from ernie_deploy.repository.options import BuildOptions, check_options
from ernie_deploy.repository.resolve import resolve_options
from ernie_deploy.repository.signature import onnx_signature

from .conftest import ROOT, artifacts

# The demo models' records, as a model of each task is when no stage has written more (the tiny models' shapes).
SEQ, TOKEN = ModelSpec.new(SEQ_CLS), ModelSpec.new(TOKEN_CLS)


def test_configs_round_trip_through_the_protobuf_parser(tiny_pipeline):
    for runtime in ("python", "onnxruntime"):
        for config in task_configs(
            resolve_options(SEQ, BuildOptions(runtime=runtime, layout="ensemble")), tiny_pipeline.onnx
        ):
            assert parse(render(config)) == config


def test_model_config_matches_the_onnx_signature(tiny_pipeline):
    inputs, outputs = onnx_signature(tiny_pipeline.onnx)
    assert [s.name for s in inputs] == list(MODEL_INPUTS)
    assert outputs[0].name == LOGITS and outputs[0].dims == (10,)
    for runtime in ("python", "onnxruntime"):
        tokenizer, model, post, ensemble = task_configs(
            resolve_options(SEQ, BuildOptions(runtime=runtime, layout="ensemble")), tiny_pipeline.onnx
        )
        got = {(t.name, t.data_type, tuple(t.dims)) for t in model.input}
        want = {(s.name, mc.DataType.Value(f"TYPE_{s.data_type}"), s.dims) for s in inputs}
        assert got == want
        assert [(o.name, tuple(o.dims)) for o in model.output] == [(LOGITS, (10,))]
        # What the tokenizer produces is exactly what the model consumes.
        assert {(t.name, tuple(t.dims)) for t in tokenizer.output} >= {(t.name, tuple(t.dims)) for t in model.input}
        assert model.max_batch_size > 0 and model.HasField("dynamic_batching")
        assert all(g.kind == g.KIND_CPU for c in (tokenizer, model, post) for g in c.instance_group)


def test_both_runtimes_share_tensor_names(tiny_pipeline):
    python = task_configs(resolve_options(SEQ, BuildOptions(runtime="python", layout="ensemble")), tiny_pipeline.onnx)[
        1
    ]
    ort = task_configs(
        resolve_options(SEQ, BuildOptions(runtime="onnxruntime", layout="ensemble")), tiny_pipeline.onnx
    )[1]
    assert python.backend == "python" and ort.platform == "onnxruntime_onnx"
    same = [(t.name, t.data_type, list(t.dims)) for t in python.input]
    assert same == [(t.name, t.data_type, list(t.dims)) for t in ort.input]
    assert list(python.output) == list(ort.output)


def test_ensemble_wires_every_step_input(tiny_pipeline):
    configs = task_configs(resolve_options(SEQ, BuildOptions(runtime="python", layout="ensemble")), tiny_pipeline.onnx)
    ensemble = configs[-1]
    assert ensemble.platform == "ensemble"
    produced = {"text"}
    for step in ensemble.ensemble_scheduling.step:
        assert set(step.input_map.values()) <= produced, f"{step.model_name} reads a tensor nobody wrote"
        produced |= set(step.output_map.values())
    assert {o.name for o in ensemble.output} <= produced
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [
        TOKENIZER_STEP,
        SEQ.model_step,
        SEQ.postprocess_step,
    ]


def test_onnx_whose_names_disagree_is_rejected(tiny_pipeline, tmp_path):
    model = onnx.load(str(tiny_pipeline.onnx))
    old = model.graph.output[0].name
    for node in model.graph.node:
        node.output[:] = ["scores" if n == old else n for n in node.output]
    model.graph.output[0].name = "scores"
    bad = tmp_path / "model.onnx"
    onnx.save(model, str(bad))
    with pytest.raises(ErnieDeployError, match="'logits'"):
        task_configs(resolve_options(SEQ, BuildOptions(runtime="python", layout="ensemble")), bad)


def _artifacts(p, vocab_file=None) -> ModelArtifacts:
    entry = artifacts(p)
    return replace(entry, vocab_file=vocab_file) if vocab_file else entry


def test_build_writes_a_loadable_layout(tiny_pipeline, tmp_path):
    build(_artifacts(tiny_pipeline), tmp_path, BuildOptions(runtime="onnxruntime", layout="ensemble"))
    assert (tmp_path / SEQ.model_step / "1" / "model.onnx").exists()
    assert not (tmp_path / SEQ.model_step / "1" / "model.py").exists()
    assert (tmp_path / TOKENIZER_STEP / "1" / "tokenizer.json").exists()
    assert (tmp_path / SEQ.postprocess_step / "1" / "labels.json").exists()
    assert not list(tmp_path.rglob("*.tmp")), "temporary files left behind"


def test_token_cls_configs_carry_offsets_to_the_postprocess(tiny_token_pipeline):
    tokenizer, model, post, ensemble = task_configs(
        resolve_options(TOKEN, BuildOptions(runtime="python", layout="ensemble", long_text="head")),
        tiny_token_pipeline.onnx,
    )
    assert [(o.name, tuple(o.dims)) for o in model.output] == [(LOGITS, (-1, 7))]
    # With the answers watched (the default) it also reads whether the text was cut; without, only what it decodes.
    assert {i.name for i in post.input} == {LOGITS, "text", "offsets", "lengths", "truncated"}
    unwatched = task_configs(
        resolve_options(TOKEN, BuildOptions(runtime="python", layout="ensemble", long_text="head", monitor=False)),
        tiny_token_pipeline.onnx,
    )[2]
    assert {i.name for i in unwatched.input} == {LOGITS, "text", "offsets", "lengths"}
    assert WATCHED_MODEL_PARAMETER in post.parameters and WATCHED_MODEL_PARAMETER not in unwatched.parameters
    assert [o.name for o in post.output] == ["entities"]
    assert [(o.name, o.data_type) for o in ensemble.output] == [
        ("entities", mc.TYPE_STRING),
        ("truncated", mc.TYPE_BOOL),
    ]
    tokenizer_step = ensemble.ensemble_scheduling.step[0]
    assert set(tokenizer_step.output_map) == {"input_ids", "token_type_ids", "offsets", "lengths", "truncated"}
    assert parse(render(tokenizer)) == tokenizer
    # The default for NER: the whole text in windows, merged in the postprocess, which says nothing was cut.
    tokenizer, model, post, ensemble = task_configs(
        resolve_options(TOKEN, BuildOptions(runtime="python", layout="ensemble")), tiny_token_pipeline.onnx
    )
    assert [(i.name, tuple(i.dims)) for i in model.input] == [("window_ids", (-1, -1)), ("window_type_ids", (-1, -1))]
    assert [(o.name, tuple(o.dims)) for o in model.output] == [(LOGITS, (-1, -1, 7))]
    assert {i.name for i in post.input} == {
        LOGITS, "text", "text_offsets", "text_lengths", "window_starts", "window_ends"
    }  # fmt: skip
    assert [o.name for o in post.output] == ["entities", "truncated"]
    assert [o.name for o in ensemble.output] == ["entities", "truncated"]
    tokenizer_step = ensemble.ensemble_scheduling.step[0]
    assert set(tokenizer_step.output_map) == {
        "window_ids", "window_type_ids", "window_starts", "window_ends", "text_offsets", "text_lengths"
    }  # fmt: skip


def test_logits_rank_must_fit_the_task(tiny_pipeline, tiny_token_pipeline):
    with pytest.raises(ErnieDeployError, match="does not fit task token_cls"):
        task_configs(resolve_options(TOKEN, BuildOptions(runtime="python", layout="ensemble")), tiny_pipeline.onnx)
    with pytest.raises(ErnieDeployError, match="does not fit task seq_cls"):
        task_configs(resolve_options(SEQ, BuildOptions(runtime="python", layout="ensemble")), tiny_token_pipeline.onnx)


def test_build_refuses_a_model_of_another_task_and_writes_nothing(tiny_pipeline, tmp_path):
    wrong = artifacts(tiny_pipeline, task=TOKEN_CLS.name)
    with pytest.raises(ErnieDeployError, match=r"per item, which does not fit task token_cls \(\[tokens, classes"):
        build(wrong, tmp_path / "models", BuildOptions(runtime="python", layout="ensemble"))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["models"]


def test_seq_cls_tokenizer_sends_only_what_the_model_reads(tiny_pipeline):
    ensemble = task_configs(
        resolve_options(SEQ, BuildOptions(runtime="python", layout="ensemble")), tiny_pipeline.onnx
    )[-1]
    tokenizer_step = ensemble.ensemble_scheduling.step[0]
    # and what the response passes on: whether the text was cut
    assert set(tokenizer_step.output_map) == {"input_ids", "token_type_ids", "truncated"}


def test_tasks_with_one_vocabulary_share_one_tokenizer(tiny_pipeline, tiny_token_pipeline, tmp_path):
    build(
        [_artifacts(tiny_pipeline), _artifacts(tiny_token_pipeline)],
        tmp_path,
        BuildOptions(runtime="python", layout="ensemble"),
    )
    models = sorted(p.name for p in tmp_path.iterdir())
    assert models == sorted(
        [
            TOKENIZER_STEP,
            SEQ.name,
            SEQ.model_step,
            SEQ.postprocess_step,
            TOKEN.name,
            TOKEN.model_step,
            TOKEN.postprocess_step,
        ]
    )
    for model in (SEQ, TOKEN):
        ensemble = parse((tmp_path / model.name / "config.pbtxt").read_text())
        assert ensemble.ensemble_scheduling.step[0].model_name == TOKENIZER_STEP


def test_tasks_with_different_vocabularies_get_a_tokenizer_each(tiny_pipeline, tiny_token_pipeline, tmp_path):
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text(tiny_token_pipeline.static.vocab_file.read_text() + "新词\n", encoding="utf-8")
    repo = tmp_path / "models"
    build(
        [_artifacts(tiny_pipeline), _artifacts(tiny_token_pipeline, other_vocab)],
        repo,
        BuildOptions(runtime="python", layout="ensemble"),
    )
    steps = {
        model.task: parse((repo / model.name / "config.pbtxt").read_text()).ensemble_scheduling.step[0]
        for model in (SEQ, TOKEN)
    }
    assert steps["seq_cls"].model_name != steps["token_cls"].model_name
    for step in steps.values():
        assert (repo / step.model_name / "1" / "tokenizer.json").exists()
    # The first keeps the familiar name; the other is named by its fingerprint, so a later build finds it again.
    assert sorted(step.model_name for step in steps.values())[0] == TOKENIZER_STEP


# The series of a model's reference profile that count its inputs (the dev split's lengths and how each text is read):
# the data decides them. The others (labels, entity types, confidence) count its answers, which differ a little
# between machines that train the demo models (float sums; a retrain moves a class's share by a point or two).
INPUT_SERIES = ("chars", "reading")


def _stable(config_text: str) -> str:
    """A generated config with the reference shares of its answer series reduced to their buckets: what every
    machine's build of the demo models writes alike."""
    config = parse(config_text)
    if "model_spec" in config.parameters:
        record = json.loads(config.parameters["model_spec"].string_value)
        shares = (record.get("reference") or {}).get("shares") or {}
        for series, buckets in shares.items():
            if series not in INPUT_SERIES:
                shares[series] = sorted(buckets)
        config.parameters["model_spec"].string_value = json.dumps(record, sort_keys=True)
    return render(config)


@pytest.mark.integration
def test_checked_in_repository_is_what_build_generates(repository):
    """models/ in git is what `ernie-deploy build --runtime python` writes for the demo models, byte for byte but the
    shares of what they answer in their reference profile, which are compared by their buckets (INPUT_SERIES)."""
    checked_in = sorted(
        p.relative_to(ROOT / "models") for p in (ROOT / "models").rglob("*") if p.name in ("config.pbtxt", "model.py")
    )
    generated = sorted(
        p.relative_to(repository) for p in repository.rglob("*") if p.name in ("config.pbtxt", "model.py")
    )
    assert checked_in == generated
    for rel in generated:
        ours, built = (ROOT / "models" / rel).read_text(), (repository / rel).read_text()
        if rel.name == "config.pbtxt":
            ours, built = _stable(ours), _stable(built)
        assert ours == built, rel


def test_only_the_answer_shares_are_let_differ():
    """A changed answer share is let through; a changed input share, bucket or any other byte is not."""
    text = (ROOT / "models" / "ernie_seqcls" / "config.pbtxt").read_text()
    record = json.loads(parse(text).parameters["model_spec"].string_value)

    def with_record(change) -> str:
        changed = json.loads(json.dumps(record))
        change(changed)
        config = parse(text)
        config.parameters["model_spec"].string_value = json.dumps(changed)
        return render(config)

    def nudge(series: str):
        def change(r):
            bucket = sorted(r["reference"]["shares"][series])[0]
            r["reference"]["shares"][series][bucket] += 0.01

        return change

    assert _stable(with_record(nudge("label"))) == _stable(text)
    assert _stable(with_record(nudge("chars"))) != _stable(text)
    assert _stable(with_record(lambda r: r["reference"]["shares"]["label"].update(extra=0.0))) != _stable(text)
    assert _stable(with_record(lambda r: r.update(max_seq_len=64))) != _stable(text)


def test_python_steps_take_ragged_batches_and_pad_with_the_vocab_pad_id(tiny_token_pipeline):
    tokenizer, model, post, _ = task_configs(
        resolve_options(TOKEN, BuildOptions(runtime="python", layout="ensemble")),
        tiny_token_pipeline.onnx,
        pad_token_id=3,
    )
    assert [i.allow_ragged_batch for i in model.input] == [True, True]
    assert {i.name: i.allow_ragged_batch for i in post.input} == {
        LOGITS: True,
        "text": False,
        "text_offsets": True,
        "text_lengths": False,
        "window_starts": True,
        "window_ends": True,
    }
    assert model.parameters["pad_token_id"].string_value == "3"
    ort_model = task_configs(
        resolve_options(TOKEN, BuildOptions(runtime="onnxruntime", layout="ensemble")), tiny_token_pipeline.onnx
    )[1]
    assert not any(i.allow_ragged_batch for i in ort_model.input), "the ORT backend cannot take ragged inputs"


def test_classic_layout_pads_to_max_seq_len_without_dynamic_batching(tiny_pipeline):
    configs = task_configs(
        resolve_options(SEQ, BuildOptions(runtime="python", layout="ensemble", classic=True, instances=4)),
        tiny_pipeline.onnx,
    )
    assert configs[0].parameters["pad_to_multiple_of"].string_value == "128"
    assert not any(c.HasField("dynamic_batching") for c in configs)
    assert all(g.count == 1 for c in configs for g in c.instance_group)
    assert not any(i.allow_ragged_batch for c in configs for i in c.input)


def test_ort_threads_reach_the_model_step(tiny_pipeline):
    python_step = task_configs(
        resolve_options(SEQ, BuildOptions(runtime="python", layout="ensemble", ort_threads=1)), tiny_pipeline.onnx
    )[1]
    assert python_step.parameters["intra_op_threads"].string_value == "1"
    assert "ort_spinning" not in python_step.parameters
    for mode in ("run", "always"):
        spinning = task_configs(
            resolve_options(SEQ, BuildOptions(runtime="python", layout="ensemble", ort_spinning=mode)),
            tiny_pipeline.onnx,
        )[1]
        assert spinning.parameters["ort_spinning"].string_value == mode
    with pytest.raises(ErnieDeployError, match="unknown --ort-spinning mode 'yes'"):
        check_options(BuildOptions(ort_spinning="yes"))
    ort_step = task_configs(
        resolve_options(SEQ, BuildOptions(runtime="onnxruntime", layout="ensemble", ort_threads=2)), tiny_pipeline.onnx
    )[1]
    assert ort_step.parameters["intra_op_thread_count"].string_value == "2"


def test_every_step_is_warmed_up_before_ready_with_real_inputs(tiny_token_pipeline, tmp_path):
    import struct

    from ernie_deploy.repository.configs import WARMUP_TEXT

    build(_artifacts(tiny_token_pipeline), tmp_path, BuildOptions(runtime="python", layout="ensemble"))
    for config in task_configs(
        resolve_options(TOKEN, BuildOptions(runtime="python", layout="ensemble")), tiny_token_pipeline.onnx
    ):
        if config.platform == "ensemble":
            assert not config.model_warmup
            continue
        (warmup,) = config.model_warmup
        assert set(warmup.inputs) == {i.name for i in config.input}
        for tensor in config.input:
            item = warmup.inputs[tensor.name]
            assert item.data_type == tensor.data_type and -1 not in item.dims
            if tensor.data_type == mc.TYPE_STRING:
                data = (tmp_path / config.name / "warmup" / item.input_data_file).read_bytes()
                assert data[4:].decode("utf-8") == WARMUP_TEXT and struct.unpack("<I", data[:4])[0] == len(data) - 4
            else:
                assert item.zero_data


def test_fused_layout_is_one_python_model_with_the_ensembles_interface(tiny_token_pipeline, tmp_path):
    ensemble = task_configs(
        resolve_options(TOKEN, BuildOptions(runtime="python", layout="ensemble")), tiny_token_pipeline.onnx
    )[-1]
    build(_artifacts(tiny_token_pipeline), tmp_path, BuildOptions(runtime="python", layout="fused"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [TOKEN.name]
    fused = parse((tmp_path / TOKEN.name / "config.pbtxt").read_text())
    assert fused.backend == "python" and not fused.HasField("ensemble_scheduling")
    assert list(fused.input) == list(ensemble.input) and list(fused.output) == list(ensemble.output)
    assert {"tokenizer_file", "model_file", "labels_file", "pad_token_id"} <= set(fused.parameters)
    version = tmp_path / TOKEN.name / "1"
    assert sorted(p.name for p in version.iterdir()) == [
        "labels.json",
        "model.json",
        "model.onnx",
        "model.py",
        "reference.json",
        "tokenizer.json",
    ]
    assert 'step = "pipeline"' in (version / "model.py").read_text()
    with pytest.raises(ErnieDeployError, match="--runtime python"):
        task_configs(
            resolve_options(TOKEN, BuildOptions(layout="fused", runtime="onnxruntime")), tiny_token_pipeline.onnx
        )


def test_every_step_parameter_named_as_a_record_field_carries_the_records_value(tiny_pipeline, tiny_token_pipeline):
    """The configs are functions of the resolved record: a parameter a step reads under a record field's name holds
    that field's value, in every layout (a record field a step reads reaches it with no writer code of its own)."""
    from dataclasses import fields

    from ernie_deploy.core.spec import ModelSpec
    from ernie_deploy.repository.layouts import LAYOUTS
    from ernie_deploy.repository.resolve import resolves
    from ernie_deploy.serving.parameters import SCHEMA

    record_fields = {f.name for f in fields(ModelSpec)}
    checked = set()
    for pipeline in (tiny_pipeline, tiny_token_pipeline):
        model = pipeline.static.spec
        for layout in LAYOUTS:
            options = BuildOptions(runtime="python", layout=layout, max_text_chars=321)
            if not resolves(model, options):
                continue
            record = resolve_options(model, options)
            for config in task_configs(record, pipeline.onnx):
                for key, value in config.parameters.items():
                    # (a field the record leaves None, such as a classifier's windows, is the step's default)
                    if key in record_fields and key in SCHEMA and getattr(record, key) is not None:
                        parse = SCHEMA[key].parse
                        assert parse(value.string_value, config.name) == parse(
                            str(getattr(record, key)), config.name
                        ), (
                            layout,
                            config.name,
                            key,
                        )
                        checked.add(key)
    assert {"max_seq_len", "ner_decoding"} <= checked
