"""The retrieval demo models' training (kinds/embed/train.py, kinds/rerank/train.py over train.retrieval), run by the
bootstrap as every demo model is: each starts from a trained encoder, and what it saves is an ErnieEncoder with its
base's vocabulary and the record the export and the shipped table read."""

from __future__ import annotations

import json

import pytest

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.tasks import EMBED, RERANK
from ernie_deploy.fetch.shipped import SHIPPED_ROOT
from ernie_deploy.train import bootstrap
from ernie_deploy.train.recipes import recipe_for


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))


def test_each_retrieval_recipe_starts_from_a_trained_encoder():
    assert recipe_for(EMBED)["init_from"] == "seq_cls" and recipe_for(RERANK)["init_from"] == "embed"
    with pytest.raises(BadOptionsError, match="unknown bootstrap recipe keys: temprature"):
        recipe_for(EMBED, {"temprature": 0.1})


@pytest.mark.parametrize("task", [EMBED, RERANK], ids=lambda t: t.name)
def test_each_shipped_retrieval_model_is_an_ernie_encoder_on_its_bases_vocabulary(task):
    """What the export reads of them: an ErnieEncoder's config, the base's vocabulary byte for byte (the classifier's,
    through the embed model), the length it trained at, and its base's key in its recipe. (Their recipes' short runs
    learn: tests/test_recipes_learn.py.)"""
    folder, base = SHIPPED_ROOT / task.name, recipe_for(task)["init_from"]
    meta = bootstrap.load_meta(folder)
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["ErnieEncoder"]
    assert (folder / "vocab.txt").read_bytes() == (SHIPPED_ROOT / "seq_cls" / "vocab.txt").read_bytes()
    assert meta["recipe"]["max_seq_len"] == 128 and 3 <= meta["trained_tokens"] <= 128
    assert (
        meta["recipe"]["init_checkpoint"]
        == json.loads((SHIPPED_ROOT / base / "manifest.json").read_text())["cache_key"]
    )
    assert meta["steps"] == meta["steps_per_epoch"] * meta["recipe"]["epochs"] and meta["stopped_by"] == "epochs"
