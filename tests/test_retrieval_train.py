"""The retrieval demo models' training (kinds/embed/train.py, kinds/rerank/train.py over train.retrieval), run by the
bootstrap as every demo model is: a short real run of each on a few hundred InsuranceQA pairs learns, is saved as an
ErnieEncoder with its base's vocabulary, and records what the export and the shipped table read."""

from __future__ import annotations

import json

import pytest

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.tasks import EMBED, RERANK
from ernie_deploy.fetch import datasets
from ernie_deploy.fetch.data import read_split, write_pairs
from ernie_deploy.fetch.shipped import SHIPPED_ROOT
from ernie_deploy.train import bootstrap
from ernie_deploy.train.recipes import recipe_for

SMALL = {"max_train_rows": 256, "batch_size": 32, "eval_batch_size": 64}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))


def test_each_retrieval_recipe_starts_from_a_trained_encoder():
    assert recipe_for(EMBED)["init_from"] == "seq_cls" and recipe_for(RERANK)["init_from"] == "embed"
    with pytest.raises(BadOptionsError, match="unknown bootstrap recipe keys: temprature"):
        recipe_for(EMBED, {"temprature": 0.1})


@pytest.mark.integration
def test_a_short_run_of_each_learns_and_is_saved_as_an_ernie_encoder(tmp_path):
    """256 train pairs, 8 steps each, dev and test cut to 120 and 60 pairs (a few minutes on the shared 2-core host):
    the embed model's dev recall@10 beats its start's, the demo classifier's encoder; the rerank model, started from
    the embed model the bootstrap returns for this data, re-orders its dev candidates better than it."""
    source, data = datasets.prepare("insuranceqa"), tmp_path / "data" / "small"
    for split, rows in (("train", 1000), ("dev", 120), ("test", 60)):
        write_pairs(data / f"{split}.pairs.tsv", read_split(source, split, "pairs.tsv")[0][:rows])
    embed = bootstrap.train(EMBED, data, progress=False, recipe={**SMALL, "epochs": 2})
    meta = bootstrap.load_meta(embed)
    assert meta["history"][-1]["loss"] < meta["history"][0]["loss"]
    assert meta["dev"] > meta["start_scores"]["dev"]["mrr_at_10"]
    assert json.loads((embed / "config.json").read_text())["architectures"] == ["ErnieEncoder"]
    assert (embed / "vocab.txt").read_bytes() == (SHIPPED_ROOT / "seq_cls" / "vocab.txt").read_bytes()
    assert meta["steps"] == 16 and meta["rows"]["train"] == 256 and meta["recipe"]["max_seq_len"] == 128
    assert 0 < meta["trained_tokens"] <= 128 and sorted(meta["data_sha256"]) == ["dev", "test", "train"]

    # The rerank recipe's base is the embed model of its own recipe on InsuranceQA (the caller's recipe is the rerank
    # model's alone): the shipped one.
    rerank = bootstrap.train(RERANK, data, progress=False, recipe={**SMALL, "dev_queries": None})
    meta = bootstrap.load_meta(rerank)
    assert meta["recipe"]["init_checkpoint"] and meta["dev"] >= meta["dev_embed"]["mrr_at_10"] - 0.05
    assert meta["steps"] == meta["steps_per_epoch"] > 0
    assert json.loads((rerank / "config.json").read_text())["architectures"] == ["ErnieEncoder"]
