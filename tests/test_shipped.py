"""The demo checkpoints that ship with the repository (demo/<task>/): made by this checkout's recipes from the tasks'
data, verified by sha256 before every use, taken by the bootstrap without training, refused by name when changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.tasks import SEQ_CLS, get_task
from ernie_deploy.fetch import shipped
from ernie_deploy.fetch.datasets import prepare
from ernie_deploy.pipeline.options import FetchOptions
from ernie_deploy.train import bootstrap
from ernie_deploy.train.recipes import TASK_RECIPES

TASKS = sorted(TASK_RECIPES)
# What the tree may hold of shipped weights (the files the pipeline makes from them, static and ONNX, are not shipped):
# seven models of 2 x 256, 11-13 MiB each, most of it their shared vocabulary's embeddings.
BUDGET_BYTES = 96 * 2**20
CHECKPOINT_FILES = {
    "config.json",
    "model_state.pdparams",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "bootstrap.json",
}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """An empty cache: what a test finds, it finds shipped."""
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))


def _no_training(*args, **kwargs):
    raise AssertionError("trained, where the shipped checkpoint should have been taken")


@pytest.mark.parametrize("name", TASKS)
def test_each_task_ships_a_checkpoint_this_checkouts_recipe_and_data_made(name):
    task = get_task(name)
    record = shipped.manifest(name)
    assert record is not None, f"demo/{name} has no manifest: ship it, `python -m ernie_deploy.cli.ship {name}`"
    data = prepare(task.dataset)
    # The key is over the data, the recipe and the code version: a recipe edited without shipping again fails here.
    assert bootstrap.checkpoint_dir(task, data).name == record["cache_key"]
    assert shipped.made_from(record, data, task.split_format)
    assert (
        set(record["files"])
        == CHECKPOINT_FILES
        == {p.name for p in shipped.shipped_dir(name).iterdir()} - {shipped.MANIFEST}
    )
    assert record["command"] == f"python -m ernie_deploy.train.bootstrap {name} --train"
    meta = json.loads((shipped.shipped_dir(name) / "bootstrap.json").read_text())
    assert record["seed"] == meta["seed"] and record["data"]["splits_sha256"] == meta["data_sha256"]
    scores = record["scores"]
    assert scores["metric"] == task.metric and scores["dev"] == meta["dev"]
    assert 0 < scores["test"] <= 1 and scores["test_onnx"] == scores["test"]


def test_shipped_weights_keep_within_their_budget():
    sizes = [p.stat().st_size for name in TASKS for p in shipped.shipped_dir(name).iterdir()]
    assert sum(sizes) <= BUDGET_BYTES, f"{sum(sizes) / 2**20:.1f} MiB shipped, budget {BUDGET_BYTES / 2**20:.0f}"


@pytest.mark.parametrize("name", TASKS)
def test_the_bootstrap_takes_the_shipped_checkpoint_without_training(name, monkeypatch):
    task = get_task(name)
    data = prepare(task.dataset)
    monkeypatch.setattr(bootstrap, "train_into", _no_training)
    assert bootstrap.is_cached(task, data)
    assert bootstrap.train(task, data, progress=False) == shipped.shipped_dir(name)
    # asked to train, it does not take it: the cache is empty, so it would train
    assert not bootstrap.is_cached(task, data, retrain=True)
    with pytest.raises(AssertionError, match="trained"):
        bootstrap.train(task, data, progress=False, retrain=True)


def _copy(tmp_path: Path, name: str = "seq_cls") -> Path:
    root = tmp_path / "demo"
    shutil.copytree(shipped.shipped_dir(name), root / name)
    return root


def test_a_changed_file_is_refused_by_name_with_the_fix(tmp_path):
    root = _copy(tmp_path)
    key = shipped.manifest("seq_cls")["cache_key"]
    assert shipped.verified("seq_cls", key, root) == root / "seq_cls"
    vocab = root / "seq_cls" / "vocab.txt"
    vocab.write_bytes(vocab.read_bytes() + b"x\n")
    with pytest.raises(BadCheckpointError, match=r"vocab\.txt does not match its sha256") as err:
        shipped.verified("seq_cls", key, root)
    assert "git checkout" in str(err.value) and "--train" in str(err.value)
    (root / "seq_cls" / "model_state.pdparams").unlink()
    with pytest.raises(BadCheckpointError, match=r"lacks .*model_state\.pdparams"):
        shipped.verified("seq_cls", key, root)


def test_a_checkpoint_of_another_recipe_is_refused_naming_both_keys(tmp_path):
    root = _copy(tmp_path)
    key = shipped.manifest("seq_cls")["cache_key"]
    with pytest.raises(BadCheckpointError, match="another recipe or other data") as err:
        shipped.verified("seq_cls", "f" * 64, root)
    assert key[:12] in str(err.value) and "ffffffffffff" in str(err.value)
    assert "python -m ernie_deploy.cli.ship seq_cls" in str(err.value)
    with pytest.raises(BadCheckpointError, match="no shipped uie checkpoint"):
        shipped.verified("uie", key, root)


def test_training_on_other_data_makes_a_model_of_its_own(tmp_path):
    record = shipped.manifest("seq_cls")
    data = tmp_path / "data"
    shutil.copytree(prepare(SEQ_CLS.dataset), data)
    assert shipped.made_from(record, data, SEQ_CLS.split_format)
    (data / "dev.tsv").write_text("sports\t一个标题\n", encoding="utf-8")
    assert not shipped.made_from(record, data, SEQ_CLS.split_format)
    assert not bootstrap.is_cached(SEQ_CLS, data)


def test_shipping_writes_the_manifest_of_every_file_atomically(tmp_path):
    source = shipped.shipped_dir("seq_cls")
    folder = shipped.write_shipped("seq_cls", source, {"cache_key": "k"}, tmp_path)
    record = json.loads((folder / shipped.MANIFEST).read_text())
    assert record["task"] == "seq_cls" and record["cache_key"] == "k"
    assert record["files"] == shipped.manifest("seq_cls")["files"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("flag", ["train", "force"])
def test_training_flags_without_bootstrap_are_refused(flag):
    with pytest.raises(BadOptionsError, match=f"--{flag} is about training a --bootstrap model"):
        FetchOptions(source="/some/dir", **{flag: True})


def test_the_docs_table_of_the_shipped_models_is_rendered_from_their_manifests():
    from ernie_deploy.pipeline.ship import TABLE_BEGIN, TABLE_END, TABLE_PAGE, table

    page = TABLE_PAGE.read_text(encoding="utf-8")
    assert page.count(TABLE_BEGIN) == page.count(TABLE_END) == 1, f"{TABLE_PAGE} lacks the table's marker lines"
    shown = page.split(TABLE_BEGIN + "\n", 1)[1].split(TABLE_END, 1)[0]
    assert shown == table(), "render it again: `python -m ernie_deploy.cli.ship --table`"
    assert all(f"| `{name}` |" in shown for name in TASKS)
