"""Every per-task fact lives in TaskSpec, and the stages look behaviour up by the spec's kind: adding a kind means
filling each stage's table, and a stage that branches on a task's name or metric fails here."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from ernie_deploy.cli.inputs import static_model
from ernie_deploy.client.grpc_client import DECODERS
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import KINDS, SEQ_CLS, TASKS, TOKEN_CLS, TaskSpec
from ernie_deploy.evaluate.metrics import FORMATTERS, SCORERS
from ernie_deploy.evaluate.offline import PREDICTORS
from ernie_deploy.evaluate.served import PRINTERS

PACKAGE = Path(__file__).resolve().parent.parent / "ernie_deploy"


@pytest.mark.parametrize("table", [DECODERS, SCORERS, PREDICTORS, PRINTERS], ids=lambda t: "table")
def test_every_kind_has_its_behaviour_in_each_stage(table):
    assert set(table) == set(KINDS)


def test_every_metric_has_a_report_format():
    assert {t.metric for t in TASKS.values()} <= set(FORMATTERS)


def test_specs_are_checked_when_made():
    with pytest.raises(ValueError, match="kind 'sentence'"):
        TaskSpec(**{**SEQ_CLS.__dict__, "kind": "sentence"})
    with pytest.raises(ValueError, match="prediction 'labels'"):
        TaskSpec(**{**SEQ_CLS.__dict__, "prediction": "labels"})
    assert (SEQ_CLS.logits_rank, TOKEN_CLS.logits_rank) == (1, 2)


def _task_words() -> set[str]:
    return {w for t in TASKS.values() for w in (t.name, t.metric, t.name.replace("_", "-"))}


def test_no_stage_branches_on_a_task_name_or_metric():
    """A comparison with a task's name or metric ("seq_cls", "accuracy", ...) outside core/tasks.py."""
    words, found = _task_words(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() == "core/tasks.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    if isinstance(side, ast.Constant) and side.value in words:
                        found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: compares with {side.value!r}")
    assert not found, "\n".join(found)


def _exported(tmp_path: Path, meta: dict) -> Path:
    root = tmp_path / "static"
    root.mkdir()
    (root / "export.json").write_text(json.dumps(meta))
    return root


def test_the_task_travels_with_the_exported_model(tmp_path):
    root = _exported(
        tmp_path,
        {
            "task": "token_cls",
            "model_file": "inference.json",
            "params_file": "inference.pdiparams",
            "labels": ["O", "B-PER", "I-PER"],
        },
    )
    model = static_model(None, str(root))
    assert model.task is TOKEN_CLS and model.labels == ["O", "B-PER", "I-PER"]
    assert static_model("token_cls", str(root)).task is TOKEN_CLS


def test_a_task_that_contradicts_the_export_is_refused(tmp_path):
    root = _exported(
        tmp_path,
        {"task": "token_cls", "model_file": "inference.json", "params_file": "inference.pdiparams", "labels": ["O"]},
    )
    with pytest.raises(ErnieDeployError, match="exported for task token_cls, not seq_cls") as err:
        static_model("seq_cls", str(root))
    assert "drop --task" in str(err.value)


def test_an_export_that_does_not_name_its_task_says_how_to_fix_it(tmp_path):
    root = _exported(tmp_path, {"model_file": "inference.json", "params_file": "inference.pdiparams", "labels": []})
    with pytest.raises(ErnieDeployError, match="does not say which task") as err:
        static_model(None, str(root))
    assert "ernie-deploy export --task" in str(err.value)
