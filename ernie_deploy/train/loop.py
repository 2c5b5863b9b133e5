"""The bootstrap's training run: a vocabulary built from train splits only (or the base checkpoint's), a standard
`ErnieConfig` and the task's paddlenlp class, trained on CPU with the recipe's numbers; the best dev epoch is kept
and saved in PaddleNLP layout (`config.json`, `model_state.pdparams`, `vocab.txt`, `tokenizer_config.json`) with
META_FILE holding the recipe and the numbers.

What differs between tasks lives in ernie_deploy.train.recipes and the vocabulary in ernie_deploy.train.vocab; the
batching, optimizer, loop, model selection and saving here are shared. Where a run is cached is
ernie_deploy.train.bootstrap's business: this module writes into the folder it is given.

paddle and paddlenlp are imported inside functions: importing ernie_deploy stays paddle-free.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ernie_deploy.core.errors import BadCheckpointError, BadDataError, BadOptionsError, InstallError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.fetch import data as data_mod
from ernie_deploy.train.batching import collate, evaluate, seed_everything, shuffled_batches
from ernie_deploy.train.cores import follow_cores, threads_in_use
from ernie_deploy.train.kind_recipe import KindRecipe, text_rows
from ernie_deploy.train.plan import Plan, optimizer
from ernie_deploy.train.recipes import KIND_RECIPES, RECIPE_VERSION
from ernie_deploy.train.rows import length_record, train_subset
from ernie_deploy.train.vocab import (
    SPECIAL_TOKENS,
    UNK,
    build_vocab,
    training_tokenizer,
    unk_rate,
    vocab_sources,
    write_vocab,
)

META_FILE = "bootstrap.json"


# --------------------------------------------------------------------------------------------------
# Data: vocabulary, tokenizer, encoded splits


@dataclass
class _Encoded:
    """The splits as the model reads them, and what was made on the way."""

    labels: list[str]  # label names; ids are the positions
    vocab: list[str]
    tokenizer: Any  # paddlenlp ErnieTokenizer over `vocab` (saved with the checkpoint)
    rows: dict[str, list]  # train and dev -> [(input_ids, encoded label)]
    sep_id: int
    tokenize_s: float
    unk_rate: dict[str, float]  # on the test texts
    test_rows: int


def _vocabulary(data_dir: Path, recipe: dict[str, Any], base: Path | None, train_texts: list) -> list[str]:
    """The base checkpoint's vocabulary, or one from train splits only (this task's and the recipe's vocab_datasets').
    The whole train split counts toward the vocabulary even when training uses a subset."""
    if base is not None:
        return (base / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    vocab_texts = []
    for name, path in vocab_sources(data_dir, recipe).items():
        vocab_texts += train_texts if name == recipe["dataset"] else data_mod.read_split_file(path)[0]
    return build_vocab(vocab_texts, recipe["min_word_freq"])


def _encode(out: Path, kind: KindRecipe, data_dir: Path, recipe: dict[str, Any], base: Path | None) -> _Encoded:
    """Read the splits, make the vocabulary (written to `out`) and the Paddle-native tokenizer over it, and encode
    every split."""
    import paddlenlp.transformers as ppt

    splits = {split: data_mod.read_split(Path(data_dir), split, recipe["split_format"]) for split in data_mod.SPLITS}
    train_texts, train_labels = splits["train"]
    if not train_texts:
        raise BadDataError(f"{data_dir}/train has no rows", "re-run data preparation")
    labels = kind.label_list(train_labels)
    label2id = {name: i for i, name in enumerate(labels)}
    vocab = _vocabulary(data_dir, recipe, base, train_texts)
    splits["train"] = train_subset(train_texts, train_labels, recipe)
    write_vocab(vocab, out / "vocab.txt")
    tokenizer = ppt.ErnieTokenizer(str(out / "vocab.txt"))
    if tokenizer.pad_token_id != 0:
        raise BadCheckpointError(
            f"[PAD] has id {tokenizer.pad_token_id}, expected 0",
            "train from a base checkpoint whose vocab.txt has [PAD] on its first line (build_vocab puts it there)",
        )
    t_tok = time.time()
    # Training reads train and dev; the test split is scored once, on the exported model (`ernie-deploy eval`).
    encoder = training_tokenizer(out / "vocab.txt", recipe["max_seq_len"])
    rows = {
        split: [row for t, y in zip(*splits[split]) for row in text_rows(kind, encoder, t, y, label2id)]
        for split in ("train", "dev")
    }
    if recipe.get("pack_tokens"):
        if kind.pack is None:
            raise BadOptionsError(
                f"pack_tokens joins train texts into one row; a {recipe['task']} model answers once per text",
                "drop pack_tokens from this task's recipe",
            )
        rows["train"] = kind.pack(rows["train"], recipe["pack_tokens"])
    if kind.thin is not None:
        rows["train"] = kind.thin(rows["train"], recipe)
    tokenize_s = time.time() - t_tok
    # Both texts of a pair count toward the [UNK] rate.
    test_texts = [t for item in splits["test"][0] for t in (item if isinstance(item, tuple) else (item,))]
    unk = unk_rate(training_tokenizer(out / "vocab.txt"), test_texts)
    sep_id = tokenizer.convert_tokens_to_ids("[SEP]")
    return _Encoded(labels, vocab, tokenizer, rows, sep_id, tokenize_s, unk, len(splits["test"][0]))


# --------------------------------------------------------------------------------------------------
# Model


def _build_model(task: TaskSpec, recipe: dict[str, Any], enc: _Encoded, base: Path | None):
    """The task's paddlenlp class in the recipe's shape, seeded; with the base checkpoint's encoder if given."""
    import paddlenlp.transformers as ppt

    model_cls = getattr(ppt, task.paddle_class, None)
    if model_cls is None:
        raise InstallError(f"paddlenlp.transformers has no {task.paddle_class}", "check paddlenlp==2.8.1 is installed")
    config = ppt.ErnieConfig(
        vocab_size=len(enc.vocab),
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
        id2label={i: name for i, name in enumerate(enc.labels)},
        label2id={name: i for i, name in enumerate(enc.labels)},
    )
    seed_everything(recipe["seed"])
    model = model_cls(config)
    if base is not None:
        _load_encoder(model, base)
    model.train()
    return model


def _load_encoder(model, base: Path) -> None:
    """The base checkpoint's encoder (every `ernie.` weight) into `model`; the task head keeps its fresh init."""
    import paddle

    state = paddle.load(str(base / "model_state.pdparams"))
    encoder = {k: v for k, v in state.items() if k.startswith("ernie.")}
    own = model.state_dict()
    wrong = sorted(k for k, v in encoder.items() if k not in own or list(own[k].shape) != list(v.shape))
    if wrong or not encoder:
        raise BadCheckpointError(
            f"the base checkpoint {base} does not fit this model's encoder ({', '.join(wrong[:3]) or 'no weights'})",
            "give the recipe the base task's model shape (hidden_size, layers, heads), or drop init_from",
        )
    model.set_state_dict(encoder)


# --------------------------------------------------------------------------------------------------
# The loop


class _Trainer:
    """One run's loop: its batches, optimizer and schedule, the plan of how many steps it takes, the progress bar,
    and the best dev epoch so far (whose weights are kept)."""

    def __init__(
        self, model, task: TaskSpec, kind: KindRecipe, recipe: dict[str, Any], enc: _Encoded, progress, position=None
    ):
        import numpy as np
        from tqdm import tqdm

        self.model, self.kind, self.recipe, self.enc = model, kind, recipe, enc
        self.rng = np.random.RandomState(recipe["seed"])
        self.aug_rng = np.random.RandomState(recipe["seed"] + 1)
        self.unk_id = enc.tokenizer.convert_tokens_to_ids(UNK)
        self.lengths = [len(ids) for ids, _ in enc.rows["train"]]
        batches = shuffled_batches(
            self.lengths, recipe["batch_size"], recipe["bucket_batches"], np.random.RandomState(0)
        )
        self.steps_per_epoch = len(batches)
        self.plan = Plan(self.steps_per_epoch * recipe["epochs"], recipe["budget_minutes"], recipe["warmup_ratio"])
        self.schedule, self.optimizer = optimizer(model, recipe, self.plan)
        self.history: list[dict] = []
        self.best: dict = {"epoch": 0, "dev": -1.0, "state": None}
        self.bar = tqdm(
            total=self.plan.total,
            desc=f"bootstrap {task.name}",
            unit="step",
            disable=not progress,
            file=sys.stderr,
            position=position,  # runs trained at once keep a line each
        )
        self.t_train = time.time()
        self.train_s = 0.0
        self.step = 0

    def fit(self) -> None:
        for epoch in range(1, self.recipe["epochs"] + 1):
            if self.step >= self.plan.total:
                break
            t_epoch = time.time()
            losses = self._epoch(epoch)
            self._after_epoch(epoch, losses, time.time() - t_epoch)
        self.bar.close()
        self.train_s = time.time() - self.t_train

    def _epoch(self, epoch: int) -> list[float]:
        """One pass over shuffled batches, or fewer steps where the plan ends first; returns the batch losses."""
        import numpy as np
        import paddle

        recipe, enc = self.recipe, self.enc
        losses: list[float] = []
        for idx in shuffled_batches(self.lengths, recipe["batch_size"], recipe["bucket_batches"], self.rng):
            if self.step >= self.plan.total:
                break
            ids, types, y = collate(enc.rows["train"], idx, self.kind, 0, enc.sep_id)
            if recipe["token_dropout"]:
                # Specials are ids 0..4; [UNK] also learns an embedding this way (train has no [UNK]).
                drop = (self.aug_rng.random_sample(ids.shape) < recipe["token_dropout"]) & (ids >= len(SPECIAL_TOKENS))
                ids[drop] = self.unk_id
            logits = self.model(paddle.to_tensor(ids), token_type_ids=paddle.to_tensor(types))
            loss = self.kind.loss(logits, paddle.to_tensor(y))
            loss.backward()
            self.optimizer.step()
            self.schedule.step()
            self.optimizer.clear_grad()
            losses.append(float(loss))
            self.step += 1
            if self.plan.replan(self.step, time.time() - self.t_train):
                self.bar.total = self.plan.total
                self.bar.refresh()
            self.bar.update(1)
            if len(losses) % 20 == 0:
                follow_cores()
                dev = max(self.best["dev"], 0)
                self.bar.set_postfix(epoch=epoch, loss=f"{np.mean(losses[-20:]):.3f}", dev=f"{dev:.3f}")
        return losses

    def _after_epoch(self, epoch: int, losses: list[float], epoch_s: float) -> None:
        """Score dev, record the epoch, re-plan (the dev pass took time from the budget too), keep the best."""
        import numpy as np

        enc = self.enc
        t_dev = time.time()
        dev_metric, _ = evaluate(
            self.model, enc.rows["dev"], self.kind, 0, enc.sep_id, self.recipe["eval_batch_size"], enc.labels
        )
        self.history.append(
            {
                "epoch": epoch,
                "steps": len(losses),
                "loss": float(np.mean(losses)),
                "dev": dev_metric,
                "seconds": round(epoch_s, 2),
                "dev_seconds": round(time.time() - t_dev, 2),
            }
        )
        self.plan.replan(self.step, time.time() - self.t_train, force=True)
        self.bar.total = self.plan.total
        if dev_metric > self.best["dev"]:
            self.best = {
                "epoch": epoch,
                "dev": dev_metric,
                "state": {k: v.numpy().copy() for k, v in self.model.state_dict().items()},
            }
        self.bar.set_postfix(epoch=epoch, loss=f"{np.mean(losses):.3f}", dev=f"{dev_metric:.3f}")


# --------------------------------------------------------------------------------------------------
# One run, start to end


def train_into(
    out: Path,
    task: TaskSpec,
    data_dir: Path,
    recipe: dict[str, Any],
    progress: bool,
    base: Path | None = None,
    position: int | None = None,
) -> None:
    """Train `task` on `data_dir` with the full `recipe` (starting from the `base` checkpoint's encoder and
    vocabulary if given) and save the best dev epoch's model, its tokenizer and META_FILE into `out`. position: the
    progress bar's line, for runs trained at once."""
    t_start = time.time()
    import paddle

    paddle.set_device("cpu")
    threads = follow_cores()
    kind = KIND_RECIPES[task.kind]
    if kind.run is not None:  # a kind whose training is a run of its own
        record = kind.run(out, task, data_dir, recipe, base)
        timings = {"train": record.pop("train_s"), "total": round(time.time() - t_start, 2)}
        lengths = length_record(record.pop("token_lengths"))
        meta = {**_common_meta(task, kind, data_dir, recipe, threads), **record, **lengths, "timings_s": timings}
        write_json(meta, out / META_FILE)
        return
    enc = _encode(out, kind, data_dir, recipe, base)
    model = _build_model(task, recipe, enc, base)
    trainer = _Trainer(model, task, kind, recipe, enc, progress, position)
    trainer.fit()

    model.set_state_dict({k: paddle.to_tensor(v) for k, v in trainer.best["state"].items()})
    model.eval()

    model.save_pretrained(str(out))
    if kind.config_extra is not None:
        config_file = out / "config.json"
        config = json.loads(config_file.read_text(encoding="utf-8"))
        write_json({**config, **kind.config_extra(enc.labels)}, config_file)
    enc.tokenizer.save_pretrained(str(out))
    write_vocab(enc.vocab, out / "vocab.txt")  # the file the model was trained with, byte for byte
    write_json(_meta(task, kind, data_dir, recipe, enc, trainer, threads, t_start), out / META_FILE)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _common_meta(task, kind, data_dir, recipe, threads) -> dict:
    """What META_FILE records of every run: the recipe, the data it read, the machine and the versions."""
    import paddle

    return {
        "recipe_version": RECIPE_VERSION,
        "recipe": recipe,
        "seed": recipe["seed"],
        "task": task.name,
        "paddle_class": task.paddle_class,
        "metric": kind.metric_name,
        "data_sha256": {
            split: _sha256(data_mod.split_file(data_dir, split, recipe["split_format"])) for split in data_mod.SPLITS
        },
        "vocab_sources": {name: _sha256(path) for name, path in vocab_sources(data_dir, recipe).items()},
        "threads": threads,
        "threads_at_end": threads_in_use(threads),  # more where a run trained beside it ended first
        "cpu_count": os.cpu_count(),
        "versions": {"paddle": paddle.__version__, "paddlenlp": _version("paddlenlp")},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _meta(task, kind, data_dir, recipe, enc: _Encoded, trainer: _Trainer, threads, t_start) -> dict:
    """What META_FILE records of a run of the shared loop: the common record, the labels and vocabulary, the scores,
    the history and the timings."""
    history = trainer.history
    return {
        **_common_meta(task, kind, data_dir, recipe, threads),
        "labels": enc.labels,
        "vocab_size": len(enc.vocab),
        "rows": {**{split: len(enc.rows[split]) for split in enc.rows}, "test": enc.test_rows},
        "best_epoch": trainer.best["epoch"],
        # The kept epoch's dev score, from the pass that chose it (scoring the same weights again gives the same
        # number). The test split is scored once, on the exported model (`ernie-deploy eval`), where it is the
        # number every later stage is compared with.
        "dev": trainer.best["dev"],
        "unk_rate_test": enc.unk_rate,
        "history": history,
        "timings_s": {
            "tokenize": round(enc.tokenize_s, 2),
            "train": round(trainer.train_s, 2),
            "per_epoch": [h["seconds"] for h in history],
            "total": round(time.time() - t_start, 2),
        },
        "steps": trainer.step,
        **length_record([len(ids) for ids, _ in enc.rows["train"]]),
        "stopped_by": "budget" if trainer.step < trainer.steps_per_epoch * recipe["epochs"] else "epochs",
    }


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"
