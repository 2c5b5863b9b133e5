"""A fetched checkpoint's task travels with it: `fetch --task T --model NAME` records T beside the checkpoint, and a
later `export --model NAME` reads it (else the class the checkpoint's config names, `architectures`); a `--task` that
contradicts either is refused by name, with the fix, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.tasks import EMBED, MULTI_LABEL, PAIR_CLS, RERANK, SEQ_CLS, TOKEN_CLS, UIE, tasks_of_heads
from ernie_deploy.fetch.checkpoints import TRAINING_RECORD, inspect_checkpoint
from ernie_deploy.pipeline.locate import FETCH_RECORD, checkpoint_task, recorded_task
from ernie_deploy.pipeline.options import FetchOptions
from ernie_deploy.pipeline.stages import fetch_model

from .conftest import make_tiny_checkpoint


def tiny_uie(out: Path) -> Path:
    """A tiny random UIE checkpoint (paddlenlp's UIE, save_pretrained), its config as a UIE's: no labels."""
    make_tiny_checkpoint(out, task=UIE)
    config = json.loads((out / "config.json").read_text())
    for key in ("id2label", "label2id", "num_labels", "num_classes"):
        config.pop(key, None)
    (out / "config.json").write_text(json.dumps(config))
    return out


def _checkpoint(root: Path, *heads: str, fetched: dict | None = None, trained: dict | None = None) -> Path:
    """A checkpoint's folder as inspect_checkpoint reads it (the weights' bytes are not read): its config naming
    `heads`, and the fetch and training records given."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"architectures": list(heads), "num_labels": 2}))
    (root / "model_state.pdparams").write_bytes(b"")
    (root / "vocab.txt").write_text("[PAD]\n[CLS]\n[SEP]\n[UNK]\n")
    for name, record in ((FETCH_RECORD, fetched), (TRAINING_RECORD, trained)):
        if record is not None:
            (root / name).write_text(json.dumps(record))
    return root


def _task(root: Path, task: str | None = None):
    return checkpoint_task(task, inspect_checkpoint(root))


def test_the_class_a_checkpoint_names_gives_its_task(tmp_path):
    assert tasks_of_heads(["UIE"]) == [UIE] and tasks_of_heads(["ErnieForQuestionAnswering"]) == []
    # An encoder alone is an embedding model's checkpoint; a classifier's class is a reranker's too.
    assert tasks_of_heads(["ErnieModel"]) == [EMBED] and RERANK in tasks_of_heads([SEQ_CLS.paddle_class])
    assert _task(_checkpoint(tmp_path / "uie", "UIE")) is UIE
    assert _task(_checkpoint(tmp_path / "tagger", TOKEN_CLS.paddle_class)) is TOKEN_CLS
    # A class several tasks load (a label per text, pairs, label sets): the default, as without a class.
    assert _task(_checkpoint(tmp_path / "classifier", SEQ_CLS.paddle_class)) is SEQ_CLS
    assert _task(_checkpoint(tmp_path / "unnamed")) is SEQ_CLS
    assert _task(_checkpoint(tmp_path / "pairs", PAIR_CLS.paddle_class), "pair_cls") is PAIR_CLS


def test_a_task_that_contradicts_the_class_is_refused_naming_both(tmp_path):
    root = _checkpoint(tmp_path / "uie", "UIE")
    with pytest.raises(BadOptionsError) as refused:
        _task(root, "seq_cls")
    assert "holds UIE" in refused.value.problem and "a uie model, not a seq_cls model" in refused.value.problem
    assert "pass --task uie" in refused.value.fix and "drop --task" in refused.value.fix
    classes = "a seq_cls or pair_cls or multi_label or rerank model, not a token_cls model"
    with pytest.raises(BadOptionsError, match=classes):
        _task(_checkpoint(tmp_path / "classifier", SEQ_CLS.paddle_class), "token_cls")


def test_the_recorded_task_is_read_and_a_contradicting_one_refused(tmp_path):
    root = _checkpoint(tmp_path / "pairs", SEQ_CLS.paddle_class, fetched={"task": "pair_cls"})
    assert recorded_task(root) is PAIR_CLS and _task(root) is PAIR_CLS and _task(root, "pair_cls") is PAIR_CLS
    with pytest.raises(BadOptionsError) as refused:
        _task(root, "multi_label")
    assert "was fetched as a pair_cls model (fetched.json), not a multi_label model" in refused.value.problem
    assert "drop --task" in refused.value.fix and "fetch it again with --task multi_label" in refused.value.fix
    # A bootstrap's training record names its task too; fetch's record, where both are, is what was asked for.
    trained = _checkpoint(tmp_path / "trained", SEQ_CLS.paddle_class, trained={"task": "multi_label"})
    assert _task(trained) is MULTI_LABEL
    both = _checkpoint(tmp_path / "both", SEQ_CLS.paddle_class, fetched={"task": "seq_cls"}, trained={"task": "x"})
    assert _task(both) is SEQ_CLS


def test_a_record_that_names_no_task_is_refused_naming_the_file(tmp_path):
    root = _checkpoint(tmp_path / "ck", "UIE", fetched={"task": "summarize"})
    with pytest.raises(BadCheckpointError, match="fetched.json does not name a task") as refused:
        _task(root)
    assert "fetch the checkpoint again with --task" in refused.value.fix


def test_fetch_records_the_task_it_is_given_and_refuses_one_the_class_contradicts(tmp_path):
    source = _checkpoint(tmp_path / "source", "UIE")
    fetched = fetch_model("uie", "mine", FetchOptions(source=str(source)), out=tmp_path / "mine")
    assert json.loads((fetched.path / FETCH_RECORD).read_text()) == {"task": "uie"}
    assert not (source / FETCH_RECORD).exists()  # the source folder is left as it was
    with pytest.raises(BadOptionsError, match="a uie model, not a seq_cls model"):
        fetch_model("seq_cls", "other", FetchOptions(source=str(source)), out=tmp_path / "other")
    assert not (tmp_path / "other").exists()
    # Not told the task: nothing recorded; export reads the class.
    untold = fetch_model(None, "untold", FetchOptions(source=str(source)), out=tmp_path / "untold")
    assert not (untold.path / FETCH_RECORD).exists() and _task(untold.path) is UIE


def test_export_by_name_reads_the_task_fetch_recorded(tmp_path, monkeypatch, capsys):
    """The commands a user runs on a UIE checkpoint: fetch with its task and name, then export by name alone."""
    from ernie_deploy.cli import main
    from ernie_deploy.export.static import StaticModel

    monkeypatch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(tmp_path / "artifacts"))
    checkpoint = tiny_uie(tmp_path / "uie")
    assert main(["fetch", str(checkpoint), "--task", "uie", "--model", "my_uie"]) == 0
    record = tmp_path / "artifacts" / "checkpoints" / "my_uie" / FETCH_RECORD
    assert json.loads(record.read_text()) == {"task": "uie"}
    assert main(["export", "--model", "my_uie"]) == 0
    static = StaticModel.load(tmp_path / "artifacts" / "static" / "my_uie")
    assert (static.task, static.spec.name, static.max_seq_len) == (UIE, "my_uie", 512)
    capsys.readouterr()
    assert main(["export", "--model", "my_uie", "--task", "seq_cls"]) == 2
    said = capsys.readouterr().err
    assert "fetched as a uie model" in said and "not a seq_cls model" in said and "drop --task" in said
