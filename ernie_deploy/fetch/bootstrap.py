"""Offline bootstrap: train a small ERNIE from random init on the local data split, on CPU.

No pretrained weights can be downloaded here, so the pipeline (export, convert, serve, measure) gets a
real, accurate-enough checkpoint by training one: a vocabulary built from train splits only (by default
one vocabulary from both datasets, shared by both tasks as real ERNIE checkpoints share theirs), a
standard `ErnieConfig`, and the task's paddlenlp class. The result is a directory in PaddleNLP layout
(`config.json`, `model_state.pdparams`, `vocab.txt`, `tokenizer_config.json`) so that a real
checkpoint takes exactly the same path later, plus `bootstrap.json` with the recipe and the numbers.

Results are cached under `cache_dir()/bootstrap/<key>`, the key being a sha256 over the train and dev
files, the vocabulary's source files, the recipe and RECIPE_VERSION; a second call returns at once.

What differs between tasks lives in ernie_deploy.fetch.recipes (the numbers per task, how labels are read,
encoded, scored and turned into a loss per kind of task) and the vocabulary in ernie_deploy.fetch.vocab; the
batching, optimizer, loop, model selection and saving here are shared.

paddle and paddlenlp are imported inside functions: importing ernie_deploy stays paddle-free.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path, write_json
from ernie_deploy.core.layout import cache_dir
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.fetch import data as data_mod
from ernie_deploy.fetch.recipes import KIND_RECIPES, KindRecipe, recipe_for
from ernie_deploy.fetch.vocab import (
    SPECIAL_TOKENS,
    UNK,
    build_vocab,
    unk_rate,
    vocab_sources,
    write_vocab,
)

# Bump when the code changes what a given recipe produces (vocab builder, loop, saving layout).
# 2: the training budget (planned steps), all cores, and numbers normalised in the key.
RECIPE_VERSION = 2
# The step rate is measured over this many steps (after a few warm-up ones) before the run is planned.
PLAN_AFTER_STEPS = 30

META_FILE = "bootstrap.json"


# --------------------------------------------------------------------------------------------------
# Cache key


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
    digest.update(json.dumps(_normalised(recipe), sort_keys=True).encode())
    return digest.hexdigest()


def _normalised(value: Any) -> Any:
    """The recipe as the key sees it: 8, 8.0 and 8.00 are one number, so they never train twice."""
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalised(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def training_threads() -> int:
    """Every core this process may use. Paddle sets its math library to one thread on import (measured:
    OMP_NUM_THREADS reads "1" after `import paddle`); two threads ran the token_cls training step 1.64x as
    fast on 2 cores."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def checkpoint_dir(task: TaskSpec, data_dir: Path, recipe: dict[str, Any] | None = None) -> Path:
    """Where `train` puts (or finds) the checkpoint for this task, data and recipe."""
    full = _with_base(recipe_for(task, recipe), Path(data_dir), lambda t, d: checkpoint_dir(t, d))
    return cache_dir() / "bootstrap" / cache_key(Path(data_dir), full)


def _with_base(recipe: dict[str, Any], data_dir: Path, base_checkpoint) -> dict[str, Any]:
    """The recipe with the checkpoint it starts from (`init_from`) resolved by `base_checkpoint(task, data_dir)`
    (found, or trained): its folder name is its cache key, so a retrained base retrains this model too."""
    if not recipe.get("init_from"):
        return recipe
    from ernie_deploy.core.tasks import get_task

    base_task = get_task(recipe["init_from"])
    base_data = data_mod.prepare(base_task.dataset, data_dir.parent)
    return {**recipe, "init_checkpoint": base_checkpoint(base_task, base_data).name}


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


def _collate(rows: list[tuple[list[int], Any]], idx: list[int], kind: KindRecipe, pad_id: int, sep_id: int):
    """Pad to the longest sequence of the batch. token_type_ids: 1 on a pair's second text and its [SEP] (the
    real tokens after the first [SEP]), 0 elsewhere, as ErnieTokenizer gives them; all 0 for single texts."""
    import numpy as np

    width = max(len(rows[i][0]) for i in idx)
    ids = np.full((len(idx), width), pad_id, dtype="int64")
    types = np.zeros_like(ids)
    for r, i in enumerate(idx):
        row = rows[i][0]
        ids[r, : len(row)] = row
        first_sep = row.index(sep_id) if sep_id in row else len(row)
        types[r, first_sep + 1 : len(row)] = 1
    labels = kind.collate_labels([rows[i][1] for i in idx], width)
    return ids, types, labels


def _evaluate(
    model, rows, kind: KindRecipe, pad_id: int, sep_id: int, batch_size: int, names: list[str]
) -> tuple[float, list]:
    import paddle

    model.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    logits_out, labels_out = [], []
    with paddle.no_grad():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            ids, types, labels = _collate(rows, idx, kind, pad_id, sep_id)
            logits = model(paddle.to_tensor(ids), token_type_ids=paddle.to_tensor(types))
            logits_out.append(logits.numpy())
            labels_out.append(labels)
    model.train()
    return kind.metric(logits_out, labels_out, names), logits_out


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
    full = _with_base(recipe_for(task, recipe), data_dir, lambda t, d: train(t, d, progress=progress))
    final = cache_dir() / "bootstrap" / cache_key(data_dir, full)
    if is_complete(final) and not force:
        return final
    # One trainer per checkpoint: a second process asking for the same one waits and then finds it cached,
    # instead of spending the same minutes again on the same cores.
    with _exclusive(cache_dir() / "locks" / f"bootstrap-{final.name}.lock"):
        if is_complete(final) and not force:
            return final
        with atomic_path(final) as tmp:
            tmp.mkdir()
            _train_into(tmp, task, data_dir, full, progress)
    return final


@contextmanager
def _exclusive(lock_file: Path):
    import fcntl

    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, also if the process dies
        yield


def _train_into(out: Path, task: TaskSpec, data_dir: Path, recipe: dict[str, Any], progress: bool) -> None:
    t_start = time.time()
    import numpy as np
    import paddle
    import paddlenlp.transformers as ppt
    from tqdm import tqdm

    paddle.set_device("cpu")
    threads = training_threads()
    paddle.base.core.set_num_threads(threads)
    kind = KIND_RECIPES[task.kind]
    splits = _read_splits(data_dir, recipe["split_format"])
    train_texts, train_labels = splits["train"]
    if not train_texts:
        raise ErnieDeployError(f"{data_dir}/train has no rows", "re-run data preparation")
    labels = kind.label_list(train_labels)
    label2id = {name: i for i, name in enumerate(labels)}

    # Vocabulary from train splits only (this task's and the recipe's vocab_datasets'), then the Paddle-native
    # tokenizer over it. The whole train split counts toward the vocabulary even when training uses a subset.
    base = cache_dir() / "bootstrap" / recipe["init_checkpoint"] if recipe.get("init_from") else None
    if base is not None:
        vocab = (base / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    else:
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
        split: [kind.encode(tokenizer, t, y, label2id, recipe["max_seq_len"]) for t, y in zip(*splits[split])]
        for split in data_mod.SPLITS
    }
    tokenize_s = time.time() - t_tok
    # Both texts of a pair count toward the [UNK] rate.
    unk = unk_rate(tokenizer, [t for item in splits["test"][0] for t in (item if isinstance(item, tuple) else (item,))])
    sep_id = tokenizer.convert_tokens_to_ids("[SEP]")

    model_cls = getattr(ppt, task.paddle_class, None)
    if model_cls is None:
        raise ErnieDeployError(
            f"paddlenlp.transformers has no {task.paddle_class}", "check paddlenlp==2.8.1 is installed"
        )
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
    if base is not None:
        _load_encoder(model, base)
    model.train()

    rng = np.random.RandomState(recipe["seed"])
    aug_rng = np.random.RandomState(recipe["seed"] + 1)
    unk_id = tokenizer.convert_tokens_to_ids(UNK)
    lengths = [len(ids) for ids, _ in encoded["train"]]
    steps_per_epoch = len(_batches(lengths, recipe["batch_size"], recipe["bucket_batches"], np.random.RandomState(0)))
    plan = _Plan(steps_per_epoch * recipe["epochs"], recipe["budget_minutes"], recipe["warmup_ratio"])
    schedule = paddle.optimizer.lr.LambdaDecay(recipe["learning_rate"], plan.lr_factor)
    no_decay = {p.name for n, p in model.named_parameters() if "bias" in n or "norm" in n}
    optimizer = paddle.optimizer.AdamW(
        learning_rate=schedule,
        parameters=model.parameters(),
        weight_decay=recipe["weight_decay"],
        apply_decay_param_fun=lambda name: name not in no_decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(recipe["max_grad_norm"]) if recipe["max_grad_norm"] else None,
    )

    history, best = [], {"epoch": 0, "dev": -1.0, "state": None}
    bar = tqdm(total=plan.total, desc=f"bootstrap {task.name}", unit="step", disable=not progress, file=sys.stderr)
    t_train = time.time()
    step = 0
    for epoch in range(1, recipe["epochs"] + 1):
        if step >= plan.total:
            break
        t_epoch = time.time()
        losses = []
        for idx in _batches(lengths, recipe["batch_size"], recipe["bucket_batches"], rng):
            if step >= plan.total:
                break
            ids, types, y = _collate(encoded["train"], idx, kind, 0, sep_id)
            if recipe["token_dropout"]:
                # Specials are ids 0..4; [UNK] also learns an embedding this way (train has no [UNK]).
                drop = (aug_rng.random_sample(ids.shape) < recipe["token_dropout"]) & (ids >= len(SPECIAL_TOKENS))
                ids[drop] = unk_id
            logits = model(paddle.to_tensor(ids), token_type_ids=paddle.to_tensor(types))
            loss = kind.loss(logits, paddle.to_tensor(y))
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.clear_grad()
            losses.append(float(loss))
            step += 1
            if plan.replan(step, time.time() - t_train):
                bar.total = plan.total
                bar.refresh()
            bar.update(1)
            if len(losses) % 20 == 0:
                bar.set_postfix(epoch=epoch, loss=f"{np.mean(losses[-20:]):.3f}", dev=f"{max(best['dev'], 0):.3f}")
        epoch_s = time.time() - t_epoch
        dev_metric, _ = _evaluate(model, encoded["dev"], kind, 0, sep_id, recipe["eval_batch_size"], labels)
        history.append(
            {
                "epoch": epoch,
                "steps": len(losses),
                "loss": float(np.mean(losses)),
                "dev": dev_metric,
                "seconds": round(epoch_s, 2),
            }
        )
        plan.replan(step, time.time() - t_train, force=True)  # the dev pass took time from the budget too
        bar.total = plan.total
        if dev_metric > best["dev"]:
            best = {
                "epoch": epoch,
                "dev": dev_metric,
                "state": {k: v.numpy().copy() for k, v in model.state_dict().items()},
            }
        bar.set_postfix(epoch=epoch, loss=f"{np.mean(losses):.3f}", dev=f"{dev_metric:.3f}")
    bar.close()
    train_s = time.time() - t_train

    model.set_state_dict({k: paddle.to_tensor(v) for k, v in best["state"].items()})
    model.eval()
    dev_metric, _ = _evaluate(model, encoded["dev"], kind, 0, sep_id, recipe["eval_batch_size"], labels)
    test_metric, _ = _evaluate(model, encoded["test"], kind, 0, sep_id, recipe["eval_batch_size"], labels)

    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    write_vocab(vocab, out / "vocab.txt")  # the file the model was trained with, byte for byte
    meta = {
        "recipe_version": RECIPE_VERSION,
        "recipe": recipe,
        "seed": recipe["seed"],
        "task": task.name,
        "paddle_class": task.paddle_class,
        "metric": kind.metric_name,
        "labels": labels,
        "vocab_size": len(vocab),
        "rows": {split: len(encoded[split]) for split in data_mod.SPLITS},
        "data_sha256": {
            split: _sha256(data_mod.split_file(data_dir, split, recipe["split_format"])) for split in data_mod.SPLITS
        },
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
        "steps": step,
        "stopped_by": "budget" if step < steps_per_epoch * recipe["epochs"] else "epochs",
        "threads": threads,
        "cpu_count": os.cpu_count(),
        "versions": {"paddle": paddle.__version__, "paddlenlp": _version("paddlenlp")},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_json(meta, out / META_FILE)


def _load_encoder(model, base: Path) -> None:
    """The base checkpoint's encoder (every `ernie.` weight) into `model`; the task head keeps its fresh init."""
    import paddle

    state = paddle.load(str(base / "model_state.pdparams"))
    encoder = {k: v for k, v in state.items() if k.startswith("ernie.")}
    own = model.state_dict()
    wrong = sorted(k for k, v in encoder.items() if k not in own or list(own[k].shape) != list(v.shape))
    if wrong or not encoder:
        raise ErnieDeployError(
            f"the base checkpoint {base} does not fit this model's encoder ({', '.join(wrong[:3]) or 'no weights'})",
            "give the recipe the base task's model shape (hidden_size, layers, heads), or drop init_from",
        )
    model.set_state_dict(encoder)


class _Plan:
    """How many steps the run takes: every epoch of the recipe, or as many as the training budget allows at the
    step rate measured on this machine (re-planned after each dev pass), whichever is fewer. The learning rate
    warms up and decays linearly over the planned steps, so a short budget still ends on a decayed rate."""

    def __init__(self, max_steps: int, budget_minutes: float | None, warmup_ratio: float):
        self.max_steps = self.total = max_steps
        self.budget_s = budget_minutes * 60 if budget_minutes else None
        self.warmup_ratio = warmup_ratio
        self.planned_at = 0

    def replan(self, step: int, elapsed_s: float, force: bool = False) -> bool:
        """Plan from the rate so far; returns whether the plan changed."""
        first = self.planned_at == 0 and step >= PLAN_AFTER_STEPS
        if self.budget_s is None or not (first or force) or step == 0:
            return False
        self.planned_at = step
        rate = step / max(elapsed_s, 1e-6)
        # Later plans only shorten the run (a slow stretch, a dev pass): the learning rate never climbs again.
        total = min(self.total, step + int(rate * max(0.0, self.budget_s - elapsed_s)))
        changed, self.total = total != self.total, max(total, step)
        return changed

    def lr_factor(self, step: int) -> float:
        warmup = max(1, int(self.total * self.warmup_ratio))
        if step < warmup:
            return step / warmup
        return max(0.0, (self.total - step) / max(1, self.total - warmup))


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
