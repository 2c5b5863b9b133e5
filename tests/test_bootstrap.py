"""Unit tests of the offline bootstrap: vocabulary, cache key, cache behaviour, a tiny real training run."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, SEQ_CLS
from ernie_deploy.fetch.data import write_tsv
from ernie_deploy.train import batching, bootstrap, loop
from ernie_deploy.train.plan import PLAN_AFTER_STEPS, Plan
from ernie_deploy.train.recipes import recipe_for
from ernie_deploy.train.vocab import build_vocab, training_tokenizer, unk_rate, write_vocab

TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "epochs": 10,
    "batch_size": 16,
    "learning_rate": 3e-3,
    "eval_batch_size": 64,
    "token_dropout": 0.1,
    "vocab_datasets": [],  # the synthetic train split alone
}

# Synthetic 3-class titles: a class keyword among filler characters, with some Latin and digits.
KEYWORDS = {"sports": ["球赛", "冠军", "nba"], "finance": ["股市", "基金", "gdp"], "game": ["网游", "玩家", "ps3"]}
FILLER = list(
    "的一是在了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质"
)


def _rows(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = sorted(KEYWORDS)[i % len(KEYWORDS)]
        parts = [rng.choice(FILLER) for _ in range(rng.randint(4, 10))]
        parts.insert(rng.randint(0, len(parts)), rng.choice(KEYWORDS[label]))
        rows.append((label, "".join(parts) + rng.choice(["", " 2010", " iPhone", "：2011年"])))
    return rows


def _write_data(root: Path, n_train: int = 200) -> Path:
    write_tsv(root / "train.tsv", _rows(n_train, 1))
    write_tsv(root / "dev.tsv", _rows(60, 2))
    write_tsv(root / "test.tsv", _rows(60, 3))
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny real training run, shared by the tests that inspect its output."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path_factory.mktemp("cache")))
        data_dir = _write_data(tmp_path_factory.mktemp("data"))
        t0 = time.time()
        ckpt = bootstrap.train(SEQ_CLS, data_dir, progress=False, recipe=TINY)
        first_s = time.time() - t0
        yield {"ckpt": ckpt, "data_dir": data_dir, "first_s": first_s, "cache": Path(os.environ["ERNIE_DEPLOY_CACHE"])}


# ---------------------------------------------------------------------------------------------------
# vocabulary


def _tokenizer(vocab, tmp_path):
    from paddlenlp.transformers import ErnieTokenizer

    write_vocab(vocab, tmp_path / "vocab.txt")
    return ErnieTokenizer(str(tmp_path / "vocab.txt"))


def test_vocab_specials_first_and_unique():
    vocab = build_vocab(["iPhone 4S发布会", "GDP增长10%"])
    assert vocab[:5] == ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
    assert len(vocab) == len(set(vocab))


def test_vocab_covers_seen_chars_in_new_combinations(tmp_path):
    train = ["iPhone 4S发布会", "2010年GDP增长10%", "QQ与MSN合作", "Café开业"]
    vocab = build_vocab(train, min_word_freq=2)
    tok = _tokenizer(vocab, tmp_path)
    # Only characters seen in training, but words never seen: needs `c` and `##c` for Latin and digits.
    for text in ["phone 2014 gdp", "msnqq 4s 01", "发布GDP增长", "Cafe QQ发布"]:
        pieces = tok.tokenize(text)
        assert "[UNK]" not in pieces, (text, pieces)
    pieces = training_tokenizer(tmp_path / "vocab.txt")
    assert unk_rate(pieces, ["phone 2014 gdp"])["token_rate"] == 0.0
    # An unseen character is [UNK] (so the check above can fail) and is counted.
    assert tok.tokenize("火") == ["[UNK]"]
    rate = unk_rate(pieces, ["火发布", "发布"])
    assert rate["token_rate"] == pytest.approx(1 / 5) and rate["texts_with_unk"] == 0.5


def test_vocab_keeps_frequent_words_whole(tmp_path):
    vocab = build_vocab(["2010年", "2010年", "iphone上市", "iphone发布", "nokia"], min_word_freq=2)
    assert "2010" in vocab and "iphone" in vocab and "nokia" not in vocab
    tok = _tokenizer(vocab, tmp_path)
    assert tok.tokenize("iPhone 2010") == ["iphone", "2010"]
    assert tok.tokenize("nokia") == ["n", "##o", "##k", "##i", "##a"]


# ---------------------------------------------------------------------------------------------------
# cache key and recipe


def test_cache_key_changes_with_data_and_recipe(tmp_path):
    data_dir = _write_data(tmp_path)
    recipe = recipe_for(SEQ_CLS, TINY)
    key = bootstrap.cache_key(data_dir, recipe)
    assert key == bootstrap.cache_key(data_dir, dict(recipe)) and len(key) == 64
    assert key != bootstrap.cache_key(data_dir, {**recipe, "hidden_size": 64})
    assert key != bootstrap.cache_key(data_dir, {**recipe, "seed": 7})
    for split in ("train", "dev"):
        path = data_dir / f"{split}.tsv"
        original = path.read_bytes()
        path.write_bytes(original.replace("冠军".encode(), "冠君".encode(), 1))
        assert bootstrap.cache_key(data_dir, recipe) != key, split
        path.write_bytes(original)
    assert bootstrap.cache_key(data_dir, recipe) == key


def test_cache_key_changes_with_recipe_version(tmp_path, monkeypatch):
    data_dir = _write_data(tmp_path)
    recipe = recipe_for(SEQ_CLS, TINY)
    key = bootstrap.cache_key(data_dir, recipe)
    monkeypatch.setattr(bootstrap, "RECIPE_VERSION", bootstrap.RECIPE_VERSION + 1)
    assert bootstrap.cache_key(data_dir, recipe) != key


def test_cache_key_treats_equal_numbers_as_one(tmp_path):
    data_dir = _write_data(tmp_path)
    recipe = recipe_for(SEQ_CLS, TINY)
    key = bootstrap.cache_key(data_dir, recipe)
    same = {**recipe, "epochs": float(recipe["epochs"]), "weight_decay": 1e-2, "token_dropout": 0.10}
    assert bootstrap.cache_key(data_dir, same) == key
    assert bootstrap.cache_key(data_dir, {**recipe, "max_grad_norm": 0}) == bootstrap.cache_key(
        data_dir, {**recipe, "max_grad_norm": 0.0}
    )
    assert bootstrap.cache_key(data_dir, {**recipe, "epochs": recipe["epochs"] + 1}) != key
    assert bootstrap.cache_key(data_dir, {**recipe, "budget_minutes": 5}) != key


def test_the_plan_spends_the_budget_at_the_measured_rate():
    plan = Plan(max_steps=10_000, budget_minutes=1.0, warmup_ratio=0.1)
    assert not plan.replan(10, 1.0) and plan.total == 10_000  # too few steps to measure a rate yet
    assert plan.replan(PLAN_AFTER_STEPS, 3.0)  # 10 steps/s, 57 s left
    assert plan.total == PLAN_AFTER_STEPS + 570
    assert plan.lr_factor(0) == 0.0 and plan.lr_factor(plan.total // 10) == pytest.approx(1.0)
    assert plan.lr_factor(plan.total) == 0.0  # the rate has decayed by the last planned step
    assert plan.replan(400, 70.0, force=True) and plan.total == 400  # over budget: stop here
    assert not plan.replan(400, 1.0, force=True) and plan.total == 400  # a plan never grows again
    roomy = Plan(max_steps=100, budget_minutes=60.0, warmup_ratio=0.1)
    assert not roomy.replan(PLAN_AFTER_STEPS, 1.0) and roomy.total == 100  # the epochs end first
    unbounded = Plan(max_steps=100, budget_minutes=None, warmup_ratio=0.1)
    assert not unbounded.replan(50, 1e6, force=True) and unbounded.total == 100


def test_a_budget_lets_the_budget_decide_the_length():
    from ernie_deploy.core.tasks import MULTI_LABEL

    fixed = recipe_for(MULTI_LABEL)  # a recipe of a subset of the rows
    budgeted = recipe_for(MULTI_LABEL, {"budget_minutes": 20})
    assert fixed["budget_minutes"] is None and fixed["max_train_rows"] and fixed["epochs"] < budgeted["epochs"]
    assert budgeted["max_train_rows"] is None and budgeted["budget_minutes"] == 20
    assert recipe_for(MULTI_LABEL, {"budget_minutes": 20, "epochs": 2})["epochs"] == 2  # the caller's word is last


def test_a_spent_budget_stops_training_and_keeps_the_best_model(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    data_dir = _write_data(tmp_path / "data")
    ckpt = bootstrap.train(SEQ_CLS, data_dir, progress=False, recipe={**TINY, "budget_minutes": 1e-4})
    meta = bootstrap.load_meta(ckpt)
    assert meta["stopped_by"] == "budget" and len(meta["history"]) == 1 < TINY["epochs"]
    assert meta["steps"] == meta["history"][0]["steps"] and meta["threads"] >= 1
    assert (ckpt / "model_state.pdparams").is_file() and meta["dev"] == meta["history"][0]["dev"]


def test_a_killed_runs_temporary_folder_is_removed_by_the_next_run_of_that_checkpoint(tmp_path, monkeypatch):
    """A run killed outright leaves its temporary folder in the cache; the next run of the same checkpoint (holding
    its lock, so no run of it is alive) removes it, and leaves other checkpoints' folders alone."""
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    data_dir = _write_data(tmp_path / "data")
    recipe = {**TINY, "budget_minutes": 1e-4}
    final = bootstrap.checkpoint_dir(SEQ_CLS, data_dir, recipe)
    dead, other = final.parent / f".{final.name}.dead1.tmp", final.parent / ".someotherkey.dead2.tmp"
    for folder in (dead, other):
        folder.mkdir(parents=True)
        (folder / "model_state.pdparams").write_bytes(b"half")
    assert bootstrap.train(SEQ_CLS, data_dir, progress=False, recipe=recipe) == final
    assert not dead.exists() and other.is_dir() and bootstrap.is_complete(final)


def test_concurrent_requests_for_one_checkpoint_train_it_once(tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    data_dir = _write_data(tmp_path / "data")
    calls = []

    def fake_train(out, *args):
        calls.append(out)
        time.sleep(0.5)  # long enough for the second caller to arrive while this one trains
        for name in ("config.json", "model_state.pdparams", "vocab.txt"):
            (out / name).write_text("{}")
        (out / bootstrap.META_FILE).write_text('{"trained_tokens": 8}')  # a training run records its lengths

    monkeypatch.setattr(bootstrap, "train_into", fake_train)
    results = []
    workers = [
        threading.Thread(target=lambda: results.append(bootstrap.train(SEQ_CLS, data_dir, recipe=TINY)))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(calls) == 1 and len(results) == 2 and results[0] == results[1]


def test_recipe_rejects_unknown_keys_and_tasks():
    with pytest.raises(ErnieDeployError, match="hidden_sise"):
        recipe_for(SEQ_CLS, {"hidden_sise": 8})
    from dataclasses import replace

    with pytest.raises(ErnieDeployError, match="no bootstrap recipe"):
        recipe_for(replace(SEQ_CLS, name="nope"))
    recipe = recipe_for(SEQ_CLS, {"epochs": 1})
    assert recipe["epochs"] == 1 and recipe["max_seq_len"] == DEFAULT_MAX_SEQ_LEN
    assert recipe["paddle_class"] == SEQ_CLS.paddle_class


def test_missing_data_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ErnieDeployError, match="no such data file"):
        bootstrap.train(SEQ_CLS, tmp_path / "nothing", progress=False, recipe=TINY)


def test_import_stays_paddle_free():
    code = "import sys, ernie_deploy.train.bootstrap; sys.exit(1 if 'paddle' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ---------------------------------------------------------------------------------------------------
# a tiny real training run


def test_train_writes_paddlenlp_layout(trained):
    ckpt = trained["ckpt"]
    assert ckpt.parent == trained["cache"] / "bootstrap"
    for name in ("config.json", "model_state.pdparams", "vocab.txt", "tokenizer_config.json", "bootstrap.json"):
        assert (ckpt / name).is_file(), name
    config = json.loads((ckpt / "config.json").read_text())
    assert config["id2label"] == {"0": "finance", "1": "game", "2": "sports"}
    assert config["label2id"] == {"finance": 0, "game": 1, "sports": 2}
    assert config["hidden_size"] == 32 and config["num_hidden_layers"] == 1
    assert config["vocab_size"] == len((ckpt / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert config["architectures"] == ["ErnieForSequenceClassification"]
    # no half-written temp dirs left next to it
    assert [p.name for p in ckpt.parent.iterdir()] == [ckpt.name]


def test_train_records_meta(trained):
    meta = bootstrap.load_meta(trained["ckpt"])
    assert meta["recipe"]["hidden_size"] == 32 and meta["seed"] == 42
    assert meta["rows"] == {"train": 200, "dev": 60, "test": 60}
    assert len(meta["history"]) == TINY["epochs"] == len(meta["timings_s"]["per_epoch"])
    assert 1 <= meta["best_epoch"] <= TINY["epochs"]
    assert meta["dev"] == max(h["dev"] for h in meta["history"])
    assert 0.0 <= meta["unk_rate_test"]["token_rate"] < 0.05
    # Keywords decide the class: even the tiny model must beat chance (1/3) clearly.
    assert meta["dev"] > 0.6, meta["history"]
    assert "test" not in meta  # scored once, on the exported model (`ernie-deploy eval`)


def test_checkpoint_reloads_with_same_logits(trained):
    import numpy as np
    import paddle
    from paddlenlp.transformers import ErnieConfig, ErnieForSequenceClassification, ErnieTokenizer

    from ernie_deploy.fetch.data import read_tsv

    ckpt = trained["ckpt"]
    tok = ErnieTokenizer.from_pretrained(str(ckpt))
    assert tok.pad_token_id == 0 and tok.vocab_size == bootstrap.load_meta(ckpt)["vocab_size"]
    model = ErnieForSequenceClassification.from_pretrained(str(ckpt))
    model.eval()
    # The file holds every parameter of the model (from_pretrained would silently random-init missing ones).
    state = paddle.load(str(ckpt / "model_state.pdparams"))
    assert set(state) == set(model.state_dict())

    # A model built by hand from the same config and state gives the same logits.
    manual = ErnieForSequenceClassification(ErnieConfig.from_pretrained(str(ckpt)))
    manual.set_state_dict(state)
    manual.eval()
    texts, labels = read_tsv(trained["data_dir"] / "dev.tsv")
    enc = tok(texts, padding=True, return_attention_mask=False)
    ids = paddle.to_tensor(np.asarray(enc["input_ids"], dtype="int64"))
    types = paddle.to_tensor(np.asarray(enc["token_type_ids"], dtype="int64"))
    with paddle.no_grad():
        a = model(ids, token_type_ids=types).numpy()
        b = manual(ids, token_type_ids=types).numpy()
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)

    # And it is the model whose dev accuracy bootstrap.json reports (the best epoch's weights).
    id2label = model.config.id2label
    acc = float(np.mean([id2label[int(p)] == y for p, y in zip(a.argmax(-1), labels)]))
    assert acc == pytest.approx(bootstrap.load_meta(ckpt)["dev"], abs=1e-9)


def test_second_call_is_a_cache_hit(trained, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(trained["cache"]))
    meta_file = trained["ckpt"] / "bootstrap.json"
    before = meta_file.stat().st_mtime_ns

    def boom(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(bootstrap, "train_into", boom)
    t0 = time.time()
    assert bootstrap.train(SEQ_CLS, trained["data_dir"], progress=False, recipe=TINY) == trained["ckpt"]
    assert time.time() - t0 < 1.0
    assert meta_file.stat().st_mtime_ns == before
    with pytest.raises(AssertionError, match="trained again"):
        bootstrap.train(SEQ_CLS, trained["data_dir"], progress=False, recipe=TINY, force=True)


def test_failed_run_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    data_dir = _write_data(tmp_path / "data")

    def half_then_crash(out, *args):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(bootstrap, "train_into", half_then_crash)
    with pytest.raises(KeyboardInterrupt):
        bootstrap.train(SEQ_CLS, data_dir, progress=False, recipe=TINY)
    assert list((tmp_path / "cache" / "bootstrap").iterdir()) == []


def test_training_is_deterministic(trained, tmp_path, monkeypatch):
    import numpy as np
    import paddle

    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    again = bootstrap.train(SEQ_CLS, trained["data_dir"], progress=False, recipe=TINY)
    assert again.name == trained["ckpt"].name and again != trained["ckpt"]
    assert (again / "vocab.txt").read_bytes() == (trained["ckpt"] / "vocab.txt").read_bytes()
    a = paddle.load(str(trained["ckpt"] / "model_state.pdparams"))
    b = paddle.load(str(again / "model_state.pdparams"))
    for key in a:
        np.testing.assert_array_equal(a[key].numpy(), b[key].numpy(), err_msg=key)
    assert bootstrap.load_meta(again)["history"] == [
        {**h, "seconds": g["seconds"], "dev_seconds": g["dev_seconds"]}
        for h, g in zip(bootstrap.load_meta(trained["ckpt"])["history"], bootstrap.load_meta(again)["history"])
    ]


def test_pair_rows_get_erniess_token_types(tmp_path):
    """Batches of pairs carry token type 1 on the second text and its [SEP], as ErnieTokenizer gives them."""
    from paddlenlp.transformers import ErnieTokenizer

    from ernie_deploy.core.tasks import PAIR_CLS
    from ernie_deploy.train.recipes import KIND_RECIPES

    write_vocab(build_vocab([t for _, t in _rows(50, 1)], 2), tmp_path / "vocab.txt")
    tokenizer = ErnieTokenizer(str(tmp_path / "vocab.txt"))
    kind = KIND_RECIPES[PAIR_CLS.kind]
    items = [("股市大涨的", "冠军 nba"), "球赛冠军", ("玩家", "网游基金 2010 的的的")]
    rows = [kind.encode(training_tokenizer(tmp_path / "vocab.txt", 16), item, "a", {"a": 0}) for item in items]
    sep = tokenizer.convert_tokens_to_ids("[SEP]")
    ids, types, _ = batching.collate(rows, [0, 1, 2], kind, 0, sep)
    for r, item in enumerate(items):
        want = tokenizer(*(item if isinstance(item, tuple) else (item,)), max_length=16, truncation=True)
        n = len(want["input_ids"])
        assert ids[r, :n].tolist() == want["input_ids"] and types[r, :n].tolist() == want["token_type_ids"]
        assert not types[r, n:].any()


def test_a_warm_start_takes_the_encoder_and_keys_on_the_base(tmp_path, monkeypatch):
    """init_from: the base checkpoint's name is part of the cache key (a retrained base retrains this model), its
    encoder weights are loaded, the head stays fresh, and an encoder of another shape is refused."""
    import numpy as np
    import paddle
    from paddlenlp.transformers import ErnieConfig, ErnieForSequenceClassification

    from ernie_deploy.core.tasks import PAIR_CLS

    data = _write_data(tmp_path / "data" / "pairs")
    monkeypatch.setattr(bootstrap.datasets, "prepare", lambda name, root=None: data)
    recipe = recipe_for(PAIR_CLS, {"vocab_datasets": []})
    keys = {
        name: bootstrap.cache_key(data, bootstrap._with_base(recipe, data, lambda task, d, n=name: Path(n)))
        for name in ("base-a", "base-b")
    }
    assert len(set(keys.values())) == 2

    def model(hidden, seed):
        paddle.seed(seed)
        config = ErnieConfig(
            vocab_size=50,
            hidden_size=hidden,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            num_labels=2,
        )
        return ErnieForSequenceClassification(config)

    base = model(16, 1)
    paddle.save(base.state_dict(), str(tmp_path / "model_state.pdparams"))
    warm = model(16, 2)
    head = warm.classifier.weight.numpy().copy()
    loop._load_encoder(warm, tmp_path)
    encoder = [name for name in base.state_dict() if name.startswith("ernie.")]
    assert encoder and all(np.array_equal(base.state_dict()[n].numpy(), warm.state_dict()[n].numpy()) for n in encoder)
    assert np.array_equal(warm.classifier.weight.numpy(), head)  # the head: its own fresh init, not the base's
    assert not np.array_equal(head, base.classifier.weight.numpy())
    with pytest.raises(ErnieDeployError, match="does not fit this model's encoder"):
        loop._load_encoder(model(32, 3), tmp_path)


def test_a_checkpoint_records_the_lengths_it_trained_on_and_an_older_cached_one_gets_the_same(tmp_path, monkeypatch):
    """Training records the token lengths of its train rows; a checkpoint cached before that was recorded gets the
    same record from the cache lookup, computed the way training computes it, without training again."""
    import json

    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    data_dir = _write_data(tmp_path / "data")
    ckpt = bootstrap.train(SEQ_CLS, data_dir, progress=False, recipe=TINY)
    meta = bootstrap.load_meta(ckpt)
    assert 3 <= meta["trained_tokens"] <= meta["trained_token_lengths"]["max"] <= TINY.get("max_seq_len", 128)
    older = {k: v for k, v in meta.items() if not k.startswith("trained_token")}
    (ckpt / bootstrap.META_FILE).write_text(json.dumps(older))
    monkeypatch.setattr(bootstrap, "train_into", lambda *a: pytest.fail("a cached checkpoint must not retrain"))
    assert bootstrap.train(SEQ_CLS, data_dir, progress=False, recipe=TINY) == ckpt
    again = bootstrap.load_meta(ckpt)
    assert (again["trained_tokens"], again["trained_token_lengths"]) == (
        meta["trained_tokens"],
        meta["trained_token_lengths"],
    )


# ---------------------------------------------------------------------------------------------------
# several models trained at once


def _write_token_data(root: Path) -> Path:
    from ernie_deploy.fetch.data import write_jsonl

    rng = random.Random(4)

    def rows(n: int) -> list[tuple[str, list[str]]]:
        out = []
        for _ in range(n):
            name = rng.choice(["张三", "李四", "王五"])
            filler = "".join(rng.choice(FILLER) for _ in range(rng.randint(3, 8)))
            text = filler + name + "说。"
            out.append((text, ["O"] * len(filler) + ["B-PER", "I-PER"] + ["O", "O"]))
        return out

    for split, n in (("train", 120), ("dev", 40), ("test", 40)):
        write_jsonl(root / f"{split}.jsonl", rows(n))
    return root


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="training at once takes a core per model")
def test_models_not_cached_train_at_once_each_on_its_own_core(tmp_path, monkeypatch):
    from ernie_deploy.core.tasks import TOKEN_CLS

    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    data = {SEQ_CLS.name: _write_data(tmp_path / "seq"), TOKEN_CLS.name: _write_token_data(tmp_path / "token")}
    recipe = {**TINY, "epochs": 2}
    assert not bootstrap.is_cached(SEQ_CLS, data[SEQ_CLS.name], recipe)
    ckpts = bootstrap.train_together([SEQ_CLS, TOKEN_CLS], recipe=recipe, progress=False, data=data)
    metas = [bootstrap.load_meta(c) for c in ckpts]
    assert [m["task"] for m in metas] == [SEQ_CLS.name, TOKEN_CLS.name]
    # each in its own process on its half of the cores (the one that ends last may take up the other's)
    cores = len(os.sched_getaffinity(0))
    assert min(m["threads"] for m in metas) == cores // 2 and max(m["threads_at_end"] for m in metas) <= cores
    assert all(bootstrap.is_cached(t, data[t.name], recipe) for t in (SEQ_CLS, TOKEN_CLS))
    # cached now: a second call trains nothing and returns the same folders
    t0 = time.time()
    assert bootstrap.train_together([SEQ_CLS, TOKEN_CLS], recipe=recipe, progress=False, data=data) == ckpts
    assert time.time() - t0 < 30


@pytest.mark.parametrize("length", [6, 9, 16, 128])
def test_every_kind_encodes_training_rows_as_paddlenlp_does(tmp_path, length):
    """Training encodes with the served tokenizer (train.vocab.training_tokenizer, in Rust) for speed; its rows are
    the ones paddlenlp's ErnieTokenizer(vocab.txt) gives: ids cut to the length (the longer text of a pair first),
    and for NER each piece's tag from the offsets paddlenlp computes, on texts with Latin words, digits, [UNK]s,
    spaces, accents and a pair that is cut. (All rows of the four bootstrap datasets' splits were compared once:
    no row differs.)"""
    import numpy as np
    from paddlenlp.transformers import ErnieTokenizer

    from ernie_deploy.core.tasks import MULTI_LABEL, PAIR_CLS, TOKEN_CLS
    from ernie_deploy.serving.entities import char_labels_to_token_labels
    from ernie_deploy.train.recipes import KIND_RECIPES

    write_vocab(build_vocab([t for _, t in _rows(80, 2)] + ["Café 2010年 iPhone 4S发布"], 2), tmp_path / "vocab.txt")
    paddle_tok = ErnieTokenizer(str(tmp_path / "vocab.txt"))
    ours = training_tokenizer(tmp_path / "vocab.txt", length)
    texts = ["股市大涨 nba 冠军", "Café  2010年iPhone 4S发布会火", "球赛冠军" + "的" * 14, " 网游\t基金 "]
    for text in texts:
        tags = ["B-ORG" if i % 5 == 0 else "O" for i in range(len(text))]
        want = paddle_tok(text, max_length=length, truncation=True, return_offsets_mapping=True)
        ids, labels = KIND_RECIPES[TOKEN_CLS.kind].encode(ours, text, tags, {"O": 0, "B-ORG": 1})
        offsets = np.asarray(want["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        assert ids == want["input_ids"], text
        assert labels == char_labels_to_token_labels(tags, offsets, len(ids), {"O": 0, "B-ORG": 1}).tolist(), text
        ids, hot = KIND_RECIPES[MULTI_LABEL.kind].encode(ours, text, ["a"], {"a": 0, "b": 1})
        assert ids == want["input_ids"] and list(hot) == [1.0, 0.0]
    for pair in [(texts[0], texts[2]), (texts[2], texts[1]), (texts[3], texts[0])]:
        ids, label = KIND_RECIPES[PAIR_CLS.kind].encode(ours, pair, "b", {"a": 0, "b": 1})
        assert ids == paddle_tok(*pair, max_length=length, truncation=True)["input_ids"], pair
        assert label == 1


def test_a_run_trained_at_once_ends_with_the_command_that_started_it(tmp_path):
    """`train_together`'s runs are processes of their own: when the command that started them is killed (a signal it
    cannot pass on), they end too instead of training on, holding the cores (train.bootstrap.end_with_parent)."""
    import signal

    starter = tmp_path / "starter.py"
    starter.write_text(
        "import multiprocessing, os, sys, time\n"
        "from ernie_deploy.train.bootstrap import end_with_parent\n"
        "def run(parent, path):\n"
        "    end_with_parent(parent)\n"
        "    open(path, 'w').write(str(os.getpid()))\n"
        "    time.sleep(120)\n"
        "if __name__ == '__main__':\n"
        "    ctx = multiprocessing.get_context('spawn')\n"
        "    p = ctx.Process(target=run, args=(os.getpid(), sys.argv[1]))\n"
        "    p.start()\n"
        "    p.join()\n"
    )
    pid_file = tmp_path / "run.pid"
    command = subprocess.Popen([sys.executable, str(starter), str(pid_file)], cwd=Path(__file__).parents[1])
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and command.poll() is None, "the run never started"
        time.sleep(0.2)
    run = int(pid_file.read_text())

    def alive() -> bool:
        try:
            return Path(f"/proc/{run}/status").read_text().split("State:")[1].split()[0] != "Z"
        except (FileNotFoundError, IndexError):
            return False

    assert alive()
    command.send_signal(signal.SIGKILL)
    command.wait()
    deadline = time.monotonic() + 20
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(), "the run went on after the command that started it was killed"
