"""Every per-task fact lives in TaskSpec, every per-kind fact in the kind's record (ernie_deploy/kinds/<kind>), and
the stages look behaviour up by the spec's kind in tables that list the kinds' code by name: adding a kind is its
folder, a line in the registry (kinds/__init__.py) and a line in each layer table it has code for; each table covers
exactly the kinds there are, and a stage that branches on a task's or kind's name or a metric fails here."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ernie_deploy import kinds
from ernie_deploy.cli.inputs import static_model
from ernie_deploy.client.wire import KIND_CLIENT
from ernie_deploy.core.errors import ErnieDeployError, InstallError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import SEQ_CLS, TASKS, TOKEN_CLS, TaskSpec
from ernie_deploy.evaluate.metrics import FORMATTERS, KIND_EVALUATE
from ernie_deploy.export.heads import KIND_EXPORTS
from ernie_deploy.gateway.app import KIND_JSON
from ernie_deploy.kinds import KINDS, Kind, layer_table
from ernie_deploy.repository.postprocess_graph import GRAPHS, KIND_GRAPHS
from ernie_deploy.serving.postprocess_steps import KIND_SERVING, POSTPROCESS_STEPS, WATCHES
from ernie_deploy.serving.steps import STEPS
from ernie_deploy.train.recipes import KIND_RECIPES

PACKAGE = Path(__file__).resolve().parent.parent / "ernie_deploy"

# Each layer's table of the kinds (`kinds.layer_table`), by where it lives -> (its layer, the table, whether it lists
# a kind). test_every_layer_table_is_checked_here finds them all in the source.
LAYER_TABLES = {
    "serving/postprocess_steps.py:KIND_SERVING": ("serving", KIND_SERVING, lambda k: True),
    "client/wire.py:KIND_CLIENT": ("client", KIND_CLIENT, lambda k: True),
    "gateway/app.py:KIND_JSON": ("gateway", KIND_JSON, lambda k: True),
    "evaluate/metrics.py:KIND_EVALUATE": ("evaluate", KIND_EVALUATE, lambda k: k.scored_per_text),
    "train/recipes.py:KIND_RECIPES": ("train", KIND_RECIPES, lambda k: True),
    "export/heads.py:KIND_EXPORTS": ("export", KIND_EXPORTS, lambda k: k.own_export),
    "repository/postprocess_graph.py:KIND_GRAPHS": ("repository", KIND_GRAPHS, lambda k: bool(k.graph_postprocess)),
}
# Tables read from those under another key -> (the table, the key each kind has in it; None: the kind is not in it).
KEYED_TABLES = {
    "serving/postprocess_steps.py:POSTPROCESS_STEPS": (POSTPROCESS_STEPS, lambda k: k.postprocess),
    "serving/postprocess_steps.py:WATCHES": (WATCHES, lambda k: k.name),
    "evaluate/metrics.py:FORMATTERS": (FORMATTERS, lambda k: k.metric if k.scored_per_text else None),
    "repository/postprocess_graph.py:GRAPHS": (GRAPHS, lambda k: k.graph_postprocess or None),
}


@pytest.mark.parametrize("where", sorted(LAYER_TABLES))
def test_every_layer_table_covers_exactly_the_kinds(where):
    layer, table, lists = LAYER_TABLES[where]
    assert list(table) == [name for name, kind in KINDS.items() if lists(kind)]
    for name, value in table.items():
        # under its own kind's name: the object is one its kind's module of that layer defines
        own = vars(sys.modules[f"ernie_deploy.kinds.{name}.{layer}"]).values()
        assert any(value is v for v in own), f"{where}: the entry of {name!r} is not from kinds/{name}/{layer}.py"


@pytest.mark.parametrize("where", sorted(KEYED_TABLES))
def test_every_keyed_table_covers_exactly_the_kinds(where):
    table, key = KEYED_TABLES[where]
    keys = [key(kind) for kind in KINDS.values() if key(kind) is not None]
    assert len(set(keys)) == len(keys), f"{where}: two kinds share a key: {keys}"
    assert set(table) == set(keys)


def _layer_tables() -> dict[str, tuple[str, set[str]]]:
    """Every layer table in the package: "path:name" -> (its layer, the kinds' modules its file imports)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").count(".") == 3
            if node.module.startswith("ernie_deploy.kinds.")
        }
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
                func = node.value.func
                if isinstance(func, ast.Name) and func.id == "layer_table":
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    layer = node.value.args[0].value
                    for target in targets:
                        found[f"{path.relative_to(PACKAGE).as_posix()}:{target.id}"] = (layer, imported)
    return found


def test_every_layer_table_is_checked_here():
    """A table of the kinds anywhere in the package is one of LAYER_TABLES, one per layer."""
    tables = _layer_tables()
    assert set(tables) == set(LAYER_TABLES)
    assert sorted(layer for layer, _ in tables.values()) == sorted(layer for layer, _, _ in LAYER_TABLES.values())


def test_every_kind_module_of_a_layer_is_in_its_table():
    """kinds/<kind>/<layer>.py is listed by its layer's table, by an import of it by name: no module of a kind goes
    unread, and no table reads one of another layer."""
    for where, (layer, imported) in _layer_tables().items():
        modules = {f"ernie_deploy.kinds.{p.parent.name}.{layer}" for p in (PACKAGE / "kinds").glob(f"*/{layer}.py")}
        assert {m for m in imported if m.endswith(f".{layer}")} == modules, where


def test_a_table_that_misses_a_kind_names_the_kind_and_the_file():
    fake = Kind(
        name="fake",
        logits_rank=1,
        long_text_modes=("head",),
        prediction="label",
        metric="fake_score",
        postprocess="fake_postprocess",
        split_format="tsv",
    )
    with pytest.raises(InstallError) as err:
        layer_table("client", "ernie_deploy.client.wire", dict(KIND_CLIENT), kinds={**KINDS, "fake": fake})
    assert "the client layer's table (ernie_deploy/client/wire.py) has no entry for kind 'fake'" in str(err.value)
    assert "ernie_deploy/kinds/fake/client.py" in err.value.fix and "ernie_deploy/client/wire.py" in err.value.fix
    with pytest.raises(InstallError, match="ernie_deploy/client/wire.py lists kind 'fake', which is not registered"):
        layer_table("client", "ernie_deploy.client.wire", {**KIND_CLIENT, "fake": KIND_CLIENT["sequence"]})
    with pytest.raises(InstallError, match="lists kind 'token', whose record gives the repository layer nothing"):
        layer_table(
            "repository", "x.y", {**KIND_GRAPHS, "token": None}, reads=lambda kind: bool(kind.graph_postprocess)
        )


def test_the_registry_lists_every_kind_folder():
    folders = sorted(p.name for p in (PACKAGE / "kinds").iterdir() if (p / "__init__.py").exists())
    assert list(KINDS) == folders, "register each kind in ernie_deploy/kinds/__init__.py, in the order of their names"
    for name in folders:
        record = sys.modules[f"ernie_deploy.kinds.{name}"].KIND
        assert isinstance(record, Kind) and record.name == name and record is KINDS[name]
        assert record.long_text_modes and record.metric and record.prediction


def test_a_kind_without_its_record_is_refused():
    with pytest.raises(ErnieDeployError, match="ernie_deploy/kinds/fake has no KIND record") as err:
        kinds.registered(ModuleType("ernie_deploy.kinds.fake"))
    assert "define KIND = Kind(name='fake'" in str(err.value)
    misnamed = ModuleType("ernie_deploy.kinds.fake")
    misnamed.KIND = KINDS["sequence"]
    with pytest.raises(ErnieDeployError, match="ernie_deploy/kinds/fake defines kind 'sequence'"):
        kinds.registered(misnamed)


def test_the_postprocess_steps_are_served_under_their_keys():
    assert set(POSTPROCESS_STEPS) == {kind.postprocess for kind in KINDS.values()}
    assert all(STEPS[kind.postprocess] is POSTPROCESS_STEPS[kind.postprocess] for kind in KINDS.values())


def test_a_staged_kind_reads_itself_offline():
    """evaluate.offline hands a staged kind's evaluation to the kind (its answers are no one batch of logits)."""
    assert {name for name, kind in KINDS.items() if kind.staged} == {
        name for name, evaluate in KIND_EVALUATE.items() if evaluate.offline is not None
    }


def test_every_task_has_a_kind_and_reads_its_facts():
    for task in TASKS.values():
        kind = KINDS[task.kind]
        assert (task.logits_rank, task.metric, task.prediction) == (kind.logits_rank, kind.metric, kind.prediction)


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
