"""Offline bootstrap: train a small ERNIE from random init on the local data split, on CPU.

No pretrained weights can be downloaded here, so the pipeline (export, convert, serve, measure) gets a
real, accurate-enough checkpoint by training one: a vocabulary built from train splits only (by default
one vocabulary from both datasets, shared by both tasks as real ERNIE checkpoints share theirs), a
standard `ErnieConfig`, and the task's paddlenlp class. The result is a directory in PaddleNLP layout
(`config.json`, `model_state.pdparams`, `vocab.txt`, `tokenizer_config.json`) so that a real
checkpoint takes exactly the same path later, plus `bootstrap.json` with the recipe and the numbers.

Results are cached under `cache_dir()/bootstrap/<key>`, the key being a sha256 over the train and dev
files, the vocabulary's source files, the recipe and RECIPE_VERSION; a second call returns at once.

The task-specific part is the `TASK_RECIPES` dict (how to read labels, encode them, the loss and the
metric); the vocabulary, batching, optimizer, loop, model selection and saving are shared.

paddle and paddlenlp are imported inside functions: importing ernie_deploy stays paddle-free.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ernie_deploy.fetch import data as data_mod
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.layout import cache_dir
from ernie_deploy.core.tasks import TaskSpec

# Bump when the code changes what a given recipe produces (vocab builder, loop, saving layout).
RECIPE_VERSION = 1

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")  # [PAD] must stay id 0
UNK = "[UNK]"
META_FILE = "bootstrap.json"

# The shared recipe, chosen by measurement on 2 CPU cores (bootstrap.json of a run holds its numbers).
# THUCNews test accuracy: 2 x 128, 8 epochs, lr 1e-3: 0.770 (2 min; overfits by epoch 5); adding [UNK]
# token dropout 0.1 and 10 epochs: 0.797; 2 x 256 (4 heads), lr 5e-4, token dropout 0.1, 8 epochs: 0.815
# in ~4.5 min (~33 s an epoch with per-batch padding). The nano shape (4 x 312) needs > 8 min an epoch.
DEFAULT_RECIPE: dict[str, Any] = {
    # model shape (standard ErnieConfig fields)
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 1024,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    # vocabulary: built from the train splits of these datasets, so that both tasks share one vocab.txt (and
    # one tokenizer model in the repository) the way real ERNIE 3.0 checkpoints of one size do
    "vocab_datasets": ["msra_ner", "thucnews"],
    "min_word_freq": 2,  # whole non-CJK words (numbers, Latin words) kept as one token from this count
    "max_train_rows": None,  # train on a seeded subset of this many rows (None: all)
    # optimisation
    "epochs": 8,
    "batch_size": 32,
    "learning_rate": 5e-4,
    "warmup_ratio": 0.1,
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,
    "token_dropout": 0.1,  # training only: replace this share of word pieces with [UNK] (augmentation)
    "bucket_batches": 50,  # length-sort within windows of this many batches, then shuffle the batches
    "eval_batch_size": 256,
    "seed": 42,
}


# --------------------------------------------------------------------------------------------------
# Per-task bits: everything the loop needs to know that differs between tasks.


@dataclass(frozen=True)
class TaskRecipe:
    # train labels -> ordered label names (ids are the positions)
    label_list: Callable[[list], list[str]]
    # (tokenizer, text, label, label2id, max_seq_len) -> (input_ids, encoded label)
    encode: Callable[..., tuple[list[int], Any]]
    # list of encoded labels, padded length -> numpy array for the batch
    collate_labels: Callable[[list, int], Any]
    # (logits, labels tensor) -> scalar loss tensor
    loss: Callable[[Any, Any], Any]
    # (list of logits arrays per batch, list of label arrays per batch, label names) -> metric in [0, 1]
    metric: Callable[[list, list, list[str]], float]
    metric_name: str
    overrides: dict[str, Any]  # recipe entries this task changes from DEFAULT_RECIPE


def _seq_cls_encode(tokenizer, text: str, label: str, label2id: dict[str, int], max_seq_len: int):
    ids = tokenizer(text, max_length=max_seq_len, truncation=True)["input_ids"]
    if label not in label2id:
        raise ErnieDeployError(f"label {label!r} is not among the train labels", "re-run data preparation")
    return ids, label2id[label]


def _seq_cls_collate(labels: list, _padded_len: int):
    import numpy as np

    return np.asarray(labels, dtype="int64")


def _seq_cls_loss(logits, labels):
    import paddle.nn.functional as F

    return F.cross_entropy(logits, labels)


def _accuracy(logits: list, labels: list, _names: list[str]) -> float:
    import numpy as np

    pred = np.concatenate([x.argmax(-1) for x in logits])
    gold = np.concatenate(labels)
    return float((pred == gold).mean()) if len(gold) else 0.0


def _token_cls_encode(tokenizer, text: str, tags: list[str], label2id: dict[str, int], max_seq_len: int):
    """Word pieces with one label each: the tag of the piece's first character ([CLS]/[SEP] ignored)."""
    import numpy as np

    from ernie_deploy.serving.entities import char_labels_to_token_labels

    enc = tokenizer(text, max_length=max_seq_len, truncation=True, return_offsets_mapping=True)
    ids = enc["input_ids"]
    unknown = set(tags) - set(label2id)
    if unknown:
        raise ErnieDeployError(f"tags {sorted(unknown)} are not among the train tags", "re-run data preparation")
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    return ids, char_labels_to_token_labels(tags, offsets, len(ids), label2id).tolist()


def _token_cls_collate(labels: list, padded_len: int):
    import numpy as np

    out = np.full((len(labels), padded_len), IGNORE_INDEX, dtype="int64")
    for row, seq in enumerate(labels):
        out[row, : len(seq)] = seq
    return out


def _token_cls_loss(logits, labels):
    import paddle.nn.functional as F

    return F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)


def _token_entity_f1(logits: list, labels: list, names: list[str]) -> float:
    """Entity F1 over word pieces (seqeval, strict IOB2): the model-selection signal. The reported figure is
    character-level, from `ernie-deploy eval`."""
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2

    gold, pred = [], []
    for batch_logits, batch_labels in zip(logits, labels):
        ids = batch_logits.argmax(-1)
        for row_ids, row_labels in zip(ids, batch_labels):
            keep = row_labels != IGNORE_INDEX
            gold.append([names[i] for i in row_labels[keep]])
            pred.append([names[i] for i in row_ids[keep]])
    return float(f1_score(gold, pred, mode="strict", scheme=IOB2, zero_division=0))


IGNORE_INDEX = -100  # label of [CLS], [SEP] and padding: no loss, no score

TASK_RECIPES: dict[str, TaskRecipe] = {
    "seq_cls": TaskRecipe(
        label_list=data_mod.label_names,
        encode=_seq_cls_encode,
        collate_labels=_seq_cls_collate,
        loss=_seq_cls_loss,
        metric=_accuracy,
        metric_name="accuracy",
        overrides={},
    ),
    "token_cls": TaskRecipe(
        label_list=data_mod.entity_label_names,
        encode=_token_cls_encode,
        collate_labels=_token_cls_collate,
        loss=_token_cls_loss,
        metric=_token_entity_f1,
        metric_name="token-level entity f1",
        # Measured on 2 cores (dev entity F1 over word pieces, per epoch): 2 x 256 with the classifier's
        # regularisation, 20,000 rows, 3 epochs: 0.42 / 0.59 / 0.64 (9.5 min); 2 x 128, lr 2e-3, all 48,289
        # rows: 0.48 after one epoch (3.4 min). The run is short enough that the model underfits, so
        # dropout and [UNK] dropout only slow it: without them, lr 1e-3: 0.52 / 0.61 / 0.69 (8.5 min).
        overrides={"max_train_rows": 20000, "epochs": 3, "learning_rate": 1e-3, "token_dropout": 0.0,
                   "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    ),
}


def recipe_for(task: TaskSpec, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full recipe for a task: defaults, then the task's changes, then the caller's."""
    if task.name not in TASK_RECIPES:
        raise ErnieDeployError(
            f"no bootstrap recipe for task {task.name!r}",
            f"add one to TASK_RECIPES in {__name__} (known: {', '.join(sorted(TASK_RECIPES))})",
        )
    recipe = dict(DEFAULT_RECIPE)
    recipe.update(TASK_RECIPES[task.name].overrides)
    unknown = sorted(set(overrides or {}) - set(recipe))
    if unknown:
        raise ErnieDeployError(f"unknown bootstrap recipe keys: {', '.join(unknown)}", f"use keys of {__name__}.DEFAULT_RECIPE")
    recipe.update(overrides or {})
    # Facts of the task that change the result belong to the key too.
    recipe.update(task=task.name, dataset=task.dataset, split_format=task.split_format,
                  paddle_class=task.paddle_class, max_seq_len=task.max_seq_len)
    return recipe


# --------------------------------------------------------------------------------------------------
# Vocabulary


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def build_vocab(texts: list[str], min_word_freq: int = 2) -> list[str]:
    """A WordPiece vocabulary for `ErnieTokenizer` from the given (train) texts.

    Words are what paddlenlp's BasicTokenizer yields (lower-cased, accents stripped, CJK characters
    and punctuation split into single characters), so the vocabulary matches the tokenizer exactly.
    Entries: the special tokens ([PAD] = 0), every character seen, `##c` for every character seen that
    can continue a word (not CJK, not punctuation: WordPiece marks a whole word [UNK] if one piece is
    missing), and whole words seen at least `min_word_freq` times. Ordered by frequency, ties by text.
    """
    from paddlenlp.transformers.bert.tokenizer import BasicTokenizer

    basic = BasicTokenizer(do_lower_case=True)
    words: Counter[str] = Counter()
    for text in texts:
        words.update(basic.tokenize(text))
    chars: Counter[str] = Counter()
    for word, n in words.items():
        for ch in word:
            chars[ch] += n

    def by_freq(counter: Counter[str]) -> list[str]:
        return [tok for tok, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))]

    vocab = list(SPECIAL_TOKENS)
    seen = set(vocab)
    for tok in by_freq(chars):
        if tok not in seen:
            vocab.append(tok)
            seen.add(tok)
    for ch in by_freq(chars):
        if not (_is_cjk(ch) or _is_punct(ch)) and f"##{ch}" not in seen:
            vocab.append(f"##{ch}")
            seen.add(f"##{ch}")
    for word in by_freq(words):
        if len(word) > 1 and words[word] >= min_word_freq and word not in seen:
            vocab.append(word)
            seen.add(word)
    return vocab


def write_vocab(vocab: list[str], path: Path) -> None:
    for tok in vocab:
        if not tok or any(c in tok for c in "\n\r") or tok != tok.strip():
            raise ErnieDeployError(f"vocabulary entry {tok!r} cannot be written one per line")
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")


def unk_rate(tokenizer, texts: list[str]) -> dict[str, float]:
    """Share of [UNK] among the word pieces of `texts` (no truncation, no [CLS]/[SEP])."""
    unk_id = tokenizer.convert_tokens_to_ids(UNK)
    total = unk = texts_with_unk = 0
    for text in texts:
        ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))
        n = sum(1 for i in ids if i == unk_id)
        total += len(ids)
        unk += n
        texts_with_unk += n > 0
    return {
        "token_rate": unk / total if total else 0.0,
        "texts_with_unk": texts_with_unk / len(texts) if texts else 0.0,
        "tokens": total,
    }


# --------------------------------------------------------------------------------------------------
# Cache key


def vocab_sources(data_dir: Path, recipe: dict[str, Any]) -> dict[str, Path]:
    """dataset -> train file whose texts build the vocabulary: the task's own train split always, plus the
    train splits of the recipe's `vocab_datasets` (prepared, i.e. fetched, when needed)."""
    sources = {recipe["dataset"]: data_mod.split_file(data_dir, "train", recipe["split_format"])}
    for name in sorted(recipe["vocab_datasets"]):
        if name not in sources:
            spec = data_mod.DATASETS[name]
            sources[name] = data_mod.split_file(data_mod.prepare(name), "train", spec.split_format)
    return sources


def cache_key(data_dir: Path, recipe: dict[str, Any]) -> str:
    """sha256 over the train and dev files, the vocabulary's sources, the recipe and RECIPE_VERSION."""
    digest = hashlib.sha256()
    digest.update(f"ernie-deploy-bootstrap v{RECIPE_VERSION}\n".encode())
    files = {split: data_mod.split_file(data_dir, split, recipe["split_format"]) for split in ("train", "dev")}
    for name, path in vocab_sources(data_dir, recipe).items():
        files.setdefault(f"vocab:{name}", path)
    for role, path in files.items():
        path = Path(path)
        if not path.exists():
            raise ErnieDeployError(f"no such data file: {path}", "run `ernie-deploy fetch-data` first")
        content = path.read_bytes()
        digest.update(f"{role} {len(content)}\n".encode())
        digest.update(content)
    digest.update(json.dumps(recipe, sort_keys=True).encode())
    return digest.hexdigest()


def checkpoint_dir(task: TaskSpec, data_dir: Path, recipe: dict[str, Any] | None = None) -> Path:
    """Where `train` puts (or finds) the checkpoint for this task, data and recipe."""
    full = recipe_for(task, recipe)
    return cache_dir() / "bootstrap" / cache_key(Path(data_dir), full)


def is_complete(ckpt: Path) -> bool:
    return all((ckpt / name).is_file() for name in ("config.json", "model_state.pdparams", "vocab.txt", META_FILE))


# --------------------------------------------------------------------------------------------------
# Training


def _seed_everything(seed: int) -> None:
    import numpy as np
    import paddle

    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)


def _batches(lengths: list[int], batch_size: int, bucket: int, rng) -> list[list[int]]:
    """Shuffled batches of similar length: length-sort inside shuffled windows, then shuffle batches."""
    order = rng.permutation(len(lengths)).tolist()
    window = max(1, bucket) * batch_size
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def _collate(rows: list[tuple[list[int], Any]], idx: list[int], task_recipe: TaskRecipe, pad_id: int):
    """Pad to the longest sequence of the batch; token_type_ids are all 0 (single sentence)."""
    import numpy as np

    width = max(len(rows[i][0]) for i in idx)
    ids = np.full((len(idx), width), pad_id, dtype="int64")
    for r, i in enumerate(idx):
        ids[r, : len(rows[i][0])] = rows[i][0]
    labels = task_recipe.collate_labels([rows[i][1] for i in idx], width)
    return ids, np.zeros_like(ids), labels


def _evaluate(model, rows, task_recipe: TaskRecipe, pad_id: int, batch_size: int,
              names: list[str]) -> tuple[float, list]:
    import paddle

    model.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    logits_out, labels_out = [], []
    with paddle.no_grad():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            ids, types, labels = _collate(rows, idx, task_recipe, pad_id)
            logits = model(paddle.to_tensor(ids), token_type_ids=paddle.to_tensor(types))
            logits_out.append(logits.numpy())
            labels_out.append(labels)
    model.train()
    return task_recipe.metric(logits_out, labels_out, names), logits_out


def _read_splits(data_dir: Path, fmt: str) -> dict[str, tuple[list[str], list]]:
    return {split: data_mod.read_split(Path(data_dir), split, fmt) for split in data_mod.SPLITS}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train(
    task: TaskSpec,
    data_dir: Path,
    *,
    force: bool = False,
    progress: bool = True,
    recipe: dict[str, Any] | None = None,
) -> Path:
    """Train (or find in the cache) the bootstrap checkpoint for `task`; returns its directory.

    `recipe` overrides entries of DEFAULT_RECIPE (tests use a tiny one); it is part of the cache key.
    """
    data_dir = Path(data_dir)
    full = recipe_for(task, recipe)
    final = cache_dir() / "bootstrap" / cache_key(data_dir, full)
    if is_complete(final) and not force:
        return final
    with atomic_path(final) as tmp:
        tmp.mkdir()
        _train_into(tmp, task, data_dir, full, progress)
    return final


def _train_into(out: Path, task: TaskSpec, data_dir: Path, recipe: dict[str, Any], progress: bool) -> None:
    t_start = time.time()
    import numpy as np
    import paddle
    import paddlenlp.transformers as ppt
    from tqdm import tqdm

    paddle.set_device("cpu")
    task_recipe = TASK_RECIPES[task.name]
    splits = _read_splits(data_dir, recipe["split_format"])
    train_texts, train_labels = splits["train"]
    if not train_texts:
        raise ErnieDeployError(f"{data_dir}/train has no rows", "re-run data preparation")
    labels = task_recipe.label_list(train_labels)
    label2id = {name: i for i, name in enumerate(labels)}

    # Vocabulary from train splits only (this task's and the recipe's vocab_datasets'), then the Paddle-native
    # tokenizer over it. The whole train split counts toward the vocabulary even when training uses a subset.
    vocab_texts = []
    for name, path in vocab_sources(data_dir, recipe).items():
        vocab_texts += train_texts if name == recipe["dataset"] else data_mod.read_split_file(path)[0]
    vocab = build_vocab(vocab_texts, recipe["min_word_freq"])
    if recipe["max_train_rows"] and recipe["max_train_rows"] < len(train_texts):
        keep = sorted(np.random.RandomState(recipe["seed"]).permutation(len(train_texts))[: recipe["max_train_rows"]])
        splits["train"] = ([train_texts[i] for i in keep], [train_labels[i] for i in keep])
    write_vocab(vocab, out / "vocab.txt")
    tokenizer = ppt.ErnieTokenizer(str(out / "vocab.txt"))
    if tokenizer.pad_token_id != 0:
        raise ErnieDeployError(f"[PAD] has id {tokenizer.pad_token_id}, expected 0")
    t_tok = time.time()
    encoded = {
        split: [task_recipe.encode(tokenizer, t, y, label2id, recipe["max_seq_len"]) for t, y in zip(*splits[split])]
        for split in data_mod.SPLITS
    }
    tokenize_s = time.time() - t_tok
    unk = unk_rate(tokenizer, splits["test"][0])

    model_cls = getattr(ppt, task.paddle_class, None)
    if model_cls is None:
        raise ErnieDeployError(f"paddlenlp.transformers has no {task.paddle_class}", "check paddlenlp==2.8.1 is installed")
    config = ppt.ErnieConfig(
        vocab_size=len(vocab),
        hidden_size=recipe["hidden_size"],
        num_hidden_layers=recipe["num_hidden_layers"],
        num_attention_heads=recipe["num_attention_heads"],
        intermediate_size=recipe["intermediate_size"],
        hidden_act="gelu",
        hidden_dropout_prob=recipe["hidden_dropout_prob"],
        attention_probs_dropout_prob=recipe["attention_probs_dropout_prob"],
        max_position_embeddings=recipe["max_position_embeddings"],
        type_vocab_size=recipe["type_vocab_size"],
        pad_token_id=0,
        use_task_id=False,
        id2label={i: name for i, name in enumerate(labels)},
        label2id=dict(label2id),
    )
    _seed_everything(recipe["seed"])
    model = model_cls(config)
    model.train()

    rng = np.random.RandomState(recipe["seed"])
    aug_rng = np.random.RandomState(recipe["seed"] + 1)
    unk_id = tokenizer.convert_tokens_to_ids(UNK)
    lengths = [len(ids) for ids, _ in encoded["train"]]
    steps_per_epoch = len(_batches(lengths, recipe["batch_size"], recipe["bucket_batches"], np.random.RandomState(0)))
    total_steps = steps_per_epoch * recipe["epochs"]
    schedule = ppt.LinearDecayWithWarmup(recipe["learning_rate"], total_steps, recipe["warmup_ratio"])
    no_decay = {p.name for n, p in model.named_parameters() if "bias" in n or "norm" in n}
    optimizer = paddle.optimizer.AdamW(
        learning_rate=schedule,
        parameters=model.parameters(),
        weight_decay=recipe["weight_decay"],
        apply_decay_param_fun=lambda name: name not in no_decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(recipe["max_grad_norm"]) if recipe["max_grad_norm"] else None,
    )

    history, best = [], {"epoch": 0, "dev": -1.0, "state": None}
    bar = tqdm(total=total_steps, desc=f"bootstrap {task.name}", unit="step", disable=not progress, file=sys.stderr)
    t_train = time.time()
    for epoch in range(1, recipe["epochs"] + 1):
        t_epoch = time.time()
        losses = []
        for idx in _batches(lengths, recipe["batch_size"], recipe["bucket_batches"], rng):
            ids, types, y = _collate(encoded["train"], idx, task_recipe, 0)
            if recipe["token_dropout"]:
                # Specials are ids 0..4; [UNK] also learns an embedding this way (train has no [UNK]).
                drop = (aug_rng.random_sample(ids.shape) < recipe["token_dropout"]) & (ids >= len(SPECIAL_TOKENS))
                ids[drop] = unk_id
            logits = model(paddle.to_tensor(ids), token_type_ids=paddle.to_tensor(types))
            loss = task_recipe.loss(logits, paddle.to_tensor(y))
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.clear_grad()
            losses.append(float(loss))
            bar.update(1)
            if len(losses) % 20 == 0:
                bar.set_postfix(epoch=epoch, loss=f"{np.mean(losses[-20:]):.3f}", dev=f"{max(best['dev'], 0):.3f}")
        epoch_s = time.time() - t_epoch
        dev_metric, _ = _evaluate(model, encoded["dev"], task_recipe, 0, recipe["eval_batch_size"], labels)
        history.append({"epoch": epoch, "loss": float(np.mean(losses)), "dev": dev_metric, "seconds": round(epoch_s, 2)})
        if dev_metric > best["dev"]:
            best = {"epoch": epoch, "dev": dev_metric, "state": {k: v.numpy().copy() for k, v in model.state_dict().items()}}
        bar.set_postfix(epoch=epoch, loss=f"{np.mean(losses):.3f}", dev=f"{dev_metric:.3f}")
    bar.close()
    train_s = time.time() - t_train

    model.set_state_dict({k: paddle.to_tensor(v) for k, v in best["state"].items()})
    model.eval()
    dev_metric, _ = _evaluate(model, encoded["dev"], task_recipe, 0, recipe["eval_batch_size"], labels)
    test_metric, _ = _evaluate(model, encoded["test"], task_recipe, 0, recipe["eval_batch_size"], labels)

    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    write_vocab(vocab, out / "vocab.txt")  # the file the model was trained with, byte for byte
    meta = {
        "recipe_version": RECIPE_VERSION,
        "recipe": recipe,
        "seed": recipe["seed"],
        "task": task.name,
        "paddle_class": task.paddle_class,
        "metric": task_recipe.metric_name,
        "labels": labels,
        "vocab_size": len(vocab),
        "rows": {split: len(encoded[split]) for split in data_mod.SPLITS},
        "data_sha256": {split: _sha256(data_mod.split_file(data_dir, split, recipe["split_format"]))
                        for split in data_mod.SPLITS},
        "vocab_sources": {name: _sha256(path) for name, path in vocab_sources(data_dir, recipe).items()},
        "best_epoch": best["epoch"],
        "dev": dev_metric,
        "test": test_metric,
        "unk_rate_test": unk,
        "history": history,
        "timings_s": {
            "tokenize": round(tokenize_s, 2),
            "train": round(train_s, 2),
            "per_epoch": [h["seconds"] for h in history],
            "total": round(time.time() - t_start, 2),
        },
        "steps": total_steps,
        "cpu_count": os.cpu_count(),
        "versions": {"paddle": paddle.__version__, "paddlenlp": _version("paddlenlp")},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"


def load_meta(ckpt: Path) -> dict[str, Any]:
    path = Path(ckpt) / META_FILE
    if not path.exists():
        raise ErnieDeployError(f"{ckpt} is not a bootstrap checkpoint (no {META_FILE})")
    return json.loads(path.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - exercised by hand / CLI
    import argparse

    from ernie_deploy.core.tasks import get_task

    parser = argparse.ArgumentParser(description="Train the offline bootstrap checkpoint")
    parser.add_argument("task", nargs="?", default="seq_cls")
    parser.add_argument("--force", action="store_true", help="retrain even if cached")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="override a recipe entry")
    args = parser.parse_args(argv)
    task = get_task(args.task)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = json.loads(value)
    t0 = time.time()
    ckpt = train(task, data_mod.prepare(task.dataset), force=args.force, recipe=overrides or None)
    meta = load_meta(ckpt)
    print(f"checkpoint: {ckpt}")
    print(
        f"{meta['metric']}: dev {meta['dev']:.4f}  test {meta['test']:.4f}  (best epoch {meta['best_epoch']})\n"
        f"[UNK] rate on test: {meta['unk_rate_test']['token_rate']:.4%} of tokens, "
        f"{meta['unk_rate_test']['texts_with_unk']:.2%} of texts\n"
        f"train time: {meta['timings_s']['train']:.1f}s (epochs {meta['timings_s']['per_epoch']}), "
        f"total when trained {meta['timings_s']['total']:.1f}s, this call {time.time() - t0:.1f}s"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    try:
        sys.exit(main())
    except ErnieDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
