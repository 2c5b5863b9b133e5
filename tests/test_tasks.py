"""Every per-task fact lives in TaskSpec, every per-kind fact in the kind's record (ernie_deploy/kinds/<kind>), and
the stages look behaviour up by the spec's kind in tables built from the kinds: adding a kind is adding one
subpackage, each table covers exactly the kinds there are, and a stage that branches on a task's or kind's name or
a metric fails here."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from ernie_deploy import kinds
from ernie_deploy.cli.inputs import static_model
from ernie_deploy.client.grpc_client import DECODERS
from ernie_deploy.client.wire import READERS
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import SEQ_CLS, TASKS, TOKEN_CLS, TaskSpec
from ernie_deploy.evaluate.metrics import FORMATTERS, SCORERS
from ernie_deploy.evaluate.offline import PREDICTORS
from ernie_deploy.evaluate.served import PRINTERS
from ernie_deploy.gateway.app import KIND_JSON
from ernie_deploy.kinds import KINDS, Kind
from ernie_deploy.repository.postprocess_graph import GRAPHS
from ernie_deploy.serving import postprocess_steps
from ernie_deploy.serving.postprocess_steps import POSTPROCESS_STEPS
from ernie_deploy.serving.steps import STEPS
from ernie_deploy.train.recipes import KIND_RECIPES

PACKAGE = Path(__file__).resolve().parent.parent / "ernie_deploy"

# Every table built from the kinds (`kinds.table`), by where it lives -> (the table, the key each kind has in it;
# None: the kind is not in the table). test_every_kind_table_is_checked_here finds them all in the source.
TABLES = {
    "serving/postprocess_steps.py:_STEPS": (postprocess_steps._STEPS, lambda k: k.postprocess),
    "serving/postprocess_steps.py:_FORMATS": (postprocess_steps._FORMATS, lambda k: k.postprocess),
    "serving/postprocess_steps.py:WATCHES": (postprocess_steps.WATCHES, lambda k: k.name),
    "client/wire.py:READERS": (READERS, lambda k: k.name),
    "client/grpc_client.py:DECODERS": (DECODERS, lambda k: k.name),
    "gateway/app.py:KIND_JSON": (KIND_JSON, lambda k: k.name),
    "evaluate/metrics.py:SCORERS": (SCORERS, lambda k: k.name),
    "evaluate/metrics.py:FORMATTERS": (FORMATTERS, lambda k: k.metric),
    "evaluate/offline.py:PREDICTORS": (PREDICTORS, lambda k: k.name),
    "evaluate/served.py:PRINTERS": (PRINTERS, lambda k: k.name),
    "train/recipes.py:KIND_RECIPES": (KIND_RECIPES, lambda k: k.name),
    "repository/postprocess_graph.py:GRAPHS": (GRAPHS, lambda k: k.graph_postprocess or None),
}


@pytest.mark.parametrize("where", sorted(TABLES))
def test_every_kind_table_covers_exactly_the_kinds(where):
    table, key = TABLES[where]
    keys = [key(kind) for kind in KINDS.values() if key(kind) is not None]
    assert len(set(keys)) == len(keys), f"{where}: two kinds share a key: {keys}"
    assert set(table) == set(keys)


def test_every_kind_table_is_checked_here():
    """A table built from the kinds anywhere in the package is one of TABLES."""
    built = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
                func = node.value.func
                if (
                    isinstance(func, ast.Name)
                    and func.id == "table"
                    or isinstance(func, ast.Attribute)
                    and func.attr == "table"
                ):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    built |= {f"{path.relative_to(PACKAGE).as_posix()}:{t.id}" for t in targets}
    assert built == set(TABLES)


def test_the_postprocess_steps_are_served_under_their_keys():
    assert set(POSTPROCESS_STEPS) == {kind.postprocess for kind in KINDS.values()}
    assert all(STEPS[kind.postprocess] is POSTPROCESS_STEPS[kind.postprocess] for kind in KINDS.values())


def test_every_kind_subpackage_has_its_facts_record():
    folders = sorted(p.name for p in (PACKAGE / "kinds").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(KINDS)
    for name in folders:
        record = sys.modules[f"ernie_deploy.kinds.{name}"].KIND
        assert isinstance(record, Kind) and record.name == name and record is KINDS[name]
        assert record.long_text_modes and record.metric and record.prediction


def test_every_task_has_a_kind_and_reads_its_facts():
    for task in TASKS.values():
        kind = KINDS[task.kind]
        assert (task.logits_rank, task.metric, task.prediction) == (kind.logits_rank, kind.metric, kind.prediction)


def _fake_kind(root: Path, name: str, record: str) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(record)
    (root / name / "client.py").write_text("def decode(item):\n    return item\n")


@pytest.fixture
def kinds_path(tmp_path, monkeypatch):
    """A folder added to the kinds package's path: a subpackage made there is a kind of ernie_deploy.kinds."""
    monkeypatch.setattr(kinds, "__path__", [*kinds.__path__, str(tmp_path)])
    yield tmp_path
    for module in [m for m in sys.modules if m.startswith("ernie_deploy.kinds.fake")]:
        del sys.modules[module]


def test_adding_a_kind_is_adding_a_subpackage(kinds_path):
    _fake_kind(
        kinds_path,
        "fake",
        "from ernie_deploy.kinds.base import Kind\n\n"
        "KIND = Kind(name='fake', logits_rank=1, long_text_modes=('head',), prediction='label', metric='fake_score',"
        " postprocess='fake_postprocess', split_format='tsv')\n",
    )
    found = kinds.discover()
    assert set(found) == {*KINDS, "fake"} and found["fake"].metric == "fake_score"
    decoders = kinds.table("client", "decode", kinds=found)
    assert set(decoders) == set(found) and decoders["fake"](b"x") == b"x"
    with pytest.raises(ErnieDeployError, match="kind 'fake' has no evaluate module") as err:
        kinds.table("evaluate", "score", kinds=found)
    assert "add ernie_deploy/kinds/fake/evaluate.py" in str(err.value)
    assert set(kinds.table("evaluate", "score", kinds=found, optional=True)) == set(KINDS)


def test_a_kind_without_its_record_is_refused(kinds_path):
    _fake_kind(kinds_path, "fake", "")
    with pytest.raises(ErnieDeployError, match="ernie_deploy/kinds/fake has no KIND record") as err:
        kinds.discover()
    assert "define KIND = Kind(name='fake'" in str(err.value)


def test_specs_are_checked_when_made():
    with pytest.raises(ValueError, match="kind 'sentence'"):
        TaskSpec(**{**SEQ_CLS.__dict__, "kind": "sentence"})
    with pytest.raises(ValueError, match="prediction 'label'"):
        TaskSpec(**{**SEQ_CLS.__dict__, "outputs": TOKEN_CLS.outputs})
    assert (SEQ_CLS.logits_rank, TOKEN_CLS.logits_rank) == (1, 2)


def _names() -> set[str]:
    """Task names (and their CLI spelling), kind names and metric names."""
    tasks = {w for t in TASKS.values() for w in (t.name, t.name.replace("_", "-"))}
    return tasks | set(KINDS) | {k.metric for k in KINDS.values()} | {t.metric for t in TASKS.values()}


def _compared(side: ast.expr) -> list:
    """The constants one side of a comparison holds: itself, or the items of a tuple, list or set."""
    items = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
    return [item.value for item in items if isinstance(item, ast.Constant)]


def test_no_stage_branches_on_a_task_kind_or_metric_name():
    """A comparison with a task's or kind's name or a metric ("seq_cls", "token", "accuracy", ...) outside their
    homes: core/tasks.py and kinds/."""
    words, found = _names(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        home = path.relative_to(PACKAGE).as_posix()
        if home == "core/tasks.py" or home.startswith("kinds/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for value in (v for side in (node.left, *node.comparators) for v in _compared(side)):
                    if value in words:
                        found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: compares with {value!r}")
    assert not found, "\n".join(found) + "\nread a fact of the kind's record instead (task.kind_facts)"


def _exported(tmp_path: Path, record: dict | None) -> Path:
    """An export's folder as `export` writes it: its files (export.json) and its record (model.json; None: none)."""
    root = tmp_path / "static"
    root.mkdir()
    (root / "export.json").write_text(
        json.dumps({"model_file": "inference.json", "params_file": "inference.pdiparams"})
    )
    if record is not None:
        (root / "model.json").write_text(json.dumps(record))
    return root


def test_the_task_travels_with_the_exported_model(tmp_path):
    root = _exported(tmp_path, ModelSpec.new(TOKEN_CLS, labels=("O", "B-PER", "I-PER")).to_dict())
    model = static_model(None, str(root))
    assert model.task is TOKEN_CLS and model.labels == ["O", "B-PER", "I-PER"]
    assert static_model("token_cls", str(root)).task is TOKEN_CLS


def test_a_task_that_contradicts_the_export_is_refused(tmp_path):
    root = _exported(tmp_path, ModelSpec.new(TOKEN_CLS, labels=("O",)).to_dict())
    with pytest.raises(ErnieDeployError, match="exported for task token_cls, not seq_cls") as err:
        static_model("seq_cls", str(root))
    assert "drop --task" in str(err.value)


def test_an_export_that_does_not_record_its_task_says_how_to_fix_it(tmp_path):
    """An export whose facts are in export.json alone (as before the record) is refused, never guessed at; so is a
    record that does not name its task."""
    root = _exported(tmp_path, None)
    with pytest.raises(ErnieDeployError, match="holds no model.json") as err:
        static_model(None, str(root))
    assert "ernie-deploy export" in str(err.value)
    (root / "model.json").write_text(
        json.dumps({k: v for k, v in ModelSpec.new(SEQ_CLS).to_dict().items() if k != "task"})
    )
    with pytest.raises(ErnieDeployError, match="missing fields task") as err:
        static_model(None, str(root))
    assert "export" in err.value.fix
