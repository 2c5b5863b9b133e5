"""What the retrieval kinds' training runs share (their losses are their own: kinds/embed/train.py,
kinds/rerank/train.py): InsuranceQA's (question, answer) pairs, an `ErnieEncoder` started from the base checkpoint's
encoder and vocabulary, texts cut as the served tokenizer step cuts them, AdamW over the planned steps, the epoch
chosen by dev MRR@10 as the clients score it (serving.ranking), and the model saved in PaddleNLP layout for the
export to read (kinds/embed/export.py serves the [CLS] vector, kinds/rerank/export.py P(label 1)).

paddle and paddlenlp are imported inside functions: importing ernie_deploy stays paddle-free.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ernie_deploy.core.errors import BadCheckpointError, BadDataError, BadOptionsError
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.fetch import data as data_mod
from ernie_deploy.serving.encoding import encode_items
from ernie_deploy.serving.ranking import K, ranking_report, searches, top_k, unit
from ernie_deploy.serving.tokenizer import build_tokenizer
from ernie_deploy.train.batching import seed_everything
from ernie_deploy.train.cores import follow_cores
from ernie_deploy.train.plan import Plan
from ernie_deploy.train.plan import optimizer as optimize

METRIC = f"mrr_at_{K}"  # what chooses the epoch
# The files of the base checkpoint's tokenizer the model is saved with, byte for byte (it was trained with them).
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class Run:
    """What one retrieval kind's training reads: the full recipe, the splits' (query, passage) pairs, the base
    checkpoint and the serving tokenizer over its vocabulary."""

    recipe: dict[str, Any]
    splits: dict[str, list]
    base: Path
    tokenizer: Any

    def encode(self, items: list) -> tuple:
        """Texts or (query, passage) pairs -> paddle's (input_ids, token_type_ids), cut and padded as the tokenizer
        step does it."""
        import paddle

        encoded = encode_items(self.tokenizer, items, self.recipe["max_seq_len"])
        return paddle.to_tensor(encoded.input_ids), paddle.to_tensor(encoded.token_type_ids)

    def searches(self, split: str) -> tuple[list[str], list[str], list[set[int]]]:
        return searches(self.splits[split])


def encoder(base: Path, labels: list[str]):
    """An ErnieEncoder (2-label classifier over the pooled output, as paddlenlp's retrieval heads read it) holding the
    `ernie.` weights of the checkpoint at `base`; its classifier starts fresh."""
    import paddle
    from paddlenlp.transformers import ErnieConfig
    from paddlenlp.transformers.semantic_search.modeling import ErnieEncoder

    config = json.loads((base / "config.json").read_text(encoding="utf-8"))
    config |= {
        "architectures": None,
        "id2label": dict(enumerate(labels)),
        "label2id": {n: i for i, n in enumerate(labels)},
    }
    model = ErnieEncoder(ErnieConfig(**config))
    state = {k: v for k, v in paddle.load(str(base / "model_state.pdparams")).items() if k.startswith("ernie.")}
    if sorted(state) != sorted(k for k in model.state_dict() if k.startswith("ernie.")):
        raise BadCheckpointError(f"{base} holds no whole ERNIE encoder under `ernie.`", "start from a demo model")
    model.set_state_dict(state)
    return model


def outputs(model, encode, items: list, batch_size: int, read) -> np.ndarray:
    """read(sequence output, pooled output) of each item, in batches of similar length, without dropout."""
    import paddle

    order, out = sorted(range(len(items)), key=lambda i: len(str(items[i]))), [None] * len(items)  # a pair's too
    model.eval()
    with paddle.no_grad():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            for i, value in zip(idx, read(*model(*encode([items[i] for i in idx]))).numpy()):
                out[i] = value
    return np.stack(out).astype(np.float32)


def search(model, encode, split, batch_size: int, depth: int = K) -> tuple[dict, np.ndarray, np.ndarray]:
    """A split's embed report (recall@10, MRR@10), each query's top `depth` passages and their cosines, by the served
    vector (the [CLS] hidden state); 1,024 queries at a time (train's cosines at once would take 1 GB)."""
    queries, corpus, relevant = split
    asked, passages = (unit(outputs(model, encode, texts, batch_size, lambda seq, _: seq[:, 0])) for texts in split[:2])
    top, cosine = [], []
    for start in range(0, len(asked), 1024):
        scores = asked[start : start + 1024] @ passages.T
        top.append(top_k(scores, max(depth, K)))
        cosine.append(np.take_along_axis(scores, top[-1], axis=1))
    top = np.concatenate(top)
    return {**ranking_report(top, relevant), "corpus": len(corpus)}, top, np.concatenate(cosine)


def fit(model, recipe: dict, epoch_batches, loss_of, score) -> dict:
    """Train `model` on loss_of(batch) over epoch_batches(rng), with every run's optimizer and schedule (train.plan:
    every epoch, or what the budget allows); score() -> the dev report after each epoch, whose MRR@10 chooses the
    epoch whose weights `model` keeps. Returns the run's record."""
    import paddle

    steps_per_epoch = len(epoch_batches(np.random.RandomState(0)))
    plan = Plan(steps_per_epoch * recipe["epochs"], recipe["budget_minutes"], recipe["warmup_ratio"])
    schedule, optimizer = optimize(model, recipe, plan)
    rng, history, best, step, t_train = np.random.RandomState(recipe["seed"]), [], {"dev": -1.0}, 0, time.time()
    for epoch in range(1, recipe["epochs"] + 1):
        t_epoch, losses = time.time(), []
        model.train()
        for batch in epoch_batches(rng):
            if step >= plan.total:
                break
            loss = loss_of(batch)
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.clear_grad()
            losses.append(float(loss))
            step += 1
            plan.replan(step, time.time() - t_train)
            if step % 50 == 0:
                follow_cores()  # cores handed to this process meanwhile (train.cores)
                print(f"{recipe['task']} step {step}/{plan.total} loss {np.mean(losses[-50:]):.4f}", file=sys.stderr)
        if not losses:
            break
        epoch_s, t_dev = time.time() - t_epoch, time.time()
        report = score()
        # the mean loss of the epoch, and of its first and last 10 steps: whether it fell within the epoch
        history.append({"epoch": epoch, "steps": len(losses), "loss": float(np.mean(losses)), "dev": report})
        history[-1] |= {"loss_first": float(np.mean(losses[:10])), "loss_last": float(np.mean(losses[-10:]))}
        history[-1] |= {"seconds": round(epoch_s, 2), "dev_seconds": round(time.time() - t_dev, 2)}
        plan.replan(step, time.time() - t_train, force=True)
        if report[METRIC] > best["dev"]:
            best = {"epoch": epoch, "dev": report[METRIC], "report": report}
            best["state"] = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model.set_state_dict({k: paddle.to_tensor(v) for k, v in best["state"].items()})
    return {
        **{"best_epoch": best["epoch"], "dev": best["dev"], "dev_report": best["report"], "history": history},
        **{"steps": step, "steps_per_epoch": steps_per_epoch, "train_s": round(time.time() - t_train, 2)},
        "stopped_by": "budget" if step < steps_per_epoch * recipe["epochs"] else "epochs",
    }


def _splits(data_dir: Path, recipe: dict) -> dict[str, list]:
    splits = {s: data_mod.read_split(data_dir, s, recipe["split_format"])[0] for s in data_mod.SPLITS}
    if not all(splits.values()) or not all(isinstance(p, tuple) for s in splits.values() for p in s):
        raise BadDataError(f"{data_dir} lacks (query, passage) pairs in a split", "run data preparation again")
    if recipe["max_train_rows"] and recipe["max_train_rows"] < len(splits["train"]):
        keep = np.random.RandomState(recipe["seed"]).permutation(len(splits["train"]))[: recipe["max_train_rows"]]
        splits["train"] = [splits["train"][i] for i in sorted(keep)]
    return splits


def train_into(
    out: Path, task: TaskSpec, data_dir: Path, recipe: dict, base: Path | None, *, trainer: Callable[[Run], tuple]
) -> dict:
    """Train a retrieval kind's model with `trainer` (Run -> (model, its record, the training texts' token lengths))
    from the `base` checkpoint, and save it with the base's tokenizer files into `out`; returns its record, which
    train.loop completes into META_FILE (`token_lengths` into what it records of every run's lengths)."""
    if base is None:
        raise BadOptionsError(
            f"the {task.name} recipe starts from no checkpoint: its model starts from a trained encoder",
            f"give its recipe `init_from` (a task whose demo model it starts from), as {task.name}'s in train.recipes",
        )
    if not all((base / name).is_file() for name in ("config.json", "model_state.pdparams", "vocab.txt")):
        raise BadCheckpointError(f"{base} is no checkpoint (config.json, model_state.pdparams, vocab.txt)", "pass one")
    tokenizer = build_tokenizer(base / "vocab.txt", lowercase=True)
    seed_everything(recipe["seed"])
    run = Run(recipe, _splits(data_dir, recipe), base, tokenizer)
    model, record, lengths = trainer(run)
    model.save_pretrained(str(out))  # config.json names ErnieEncoder
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copyfile(base / name, out / name)
    return {**record, "rows": {"train": len(run.splits["train"])}, "token_lengths": lengths}


def token_lengths(run: Run, items: list) -> list[int]:
    """Each training item's tokens as the model reads it (cut at max_seq_len): what the record's lengths are of."""
    return [
        int(n)
        for start in range(0, len(items), 1024)
        for n in encode_items(run.tokenizer, items[start : start + 1024], run.recipe["max_seq_len"]).lengths
    ]
