"""Bootstrap recipes: the numbers each task trains with, and what training does differently per kind of task.

A task's recipe is DEFAULT_RECIPE, then that task's changes (TASK_RECIPES, keyed by task name), then the
caller's; together with the task's own facts it goes into the cache key. How labels are read, encoded, batched,
scored and turned into a loss depends only on the task's kind (KIND_RECIPES, keyed by `TaskSpec.kind`).

paddle, paddlenlp and seqeval are imported inside functions: importing ernie_deploy stays paddle-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.fetch import data as data_mod

# Bump when the code changes what a given recipe produces (vocab builder, loop, saving layout): it is part of the
# cache key (ernie_deploy.train.bootstrap), so every cached checkpoint is trained again.
# 2: the training budget (planned steps), all cores, and numbers normalised in the key.
RECIPE_VERSION = 2

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
    "epochs": 8,  # at most; fewer where the budget runs out first
    # Minutes of training (the loop, dev passes included) on this machine; None: every epoch. The number of
    # steps is planned from the step rate measured at the start, and the learning rate decays over them.
    "budget_minutes": None,
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

# Per task: the recipe entries it changes from DEFAULT_RECIPE, and `init_from`: start from another task's bootstrap
# checkpoint (a TASKS name), its encoder weights and its vocabulary (the task head starts fresh). That checkpoint is
# trained first if the cache lacks it, and its cache key is part of this one's. Without it: random init, and a
# vocabulary built here. (Not a DEFAULT_RECIPE key: the recipe is the cache key, and the existing bootstraps keep
# theirs.)
TASK_RECIPES: dict[str, dict[str, Any]] = {
    "seq_cls": {},
    # Measured on 2 cores (dev entity F1 over word pieces, per epoch): 2 x 256 with the classifier's
    # regularisation, 20,000 rows, 3 epochs: 0.42 / 0.59 / 0.64 (9.5 min); 2 x 128, lr 2e-3, all 48,289
    # rows: 0.48 after one epoch (3.4 min). The run is short enough that the model underfits, so
    # dropout and [UNK] dropout only slow it: without them, lr 1e-3: 0.52 / 0.61 / 0.69 (8.5 min).
    # Pairs start from the classifier, whose encoder already tells the classes apart; the pair head learns to
    # compare two titles. Measured on 2 busy cores (dev accuracy per epoch, 250 steps each): 0.663 / 0.763 / 0.786,
    # test 0.811, 9.2 min of training while other jobs held the cores (~1.4 steps/s).
    "pair_cls": {"init_from": "seq_cls", "epochs": 3},
    "token_cls": {
        "max_train_rows": 20000,
        "epochs": 3,
        "learning_rate": 1e-3,
        "token_dropout": 0.0,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
    # Which entity types a sentence holds: the token_cls encoder already tells entities apart, so a short run on
    # a subset teaches the new head (the shape must stay token_cls's, whose encoder it loads). The step rate
    # measured at this shape on the shared 2-core host (busy): 60 steps of 32 in 44.6 s, 1.34 steps/s; 12,000 rows
    # for one epoch (375 steps) keeps the loop under 5 minutes there.
    "multi_label": {
        "init_from": "token_cls",
        "max_train_rows": 12000,
        "epochs": 1,
        "learning_rate": 5e-4,
        "token_dropout": 0.0,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
}


# With a training budget, the run is as long as the budget allows: every train row, up to this many epochs (the
# best dev checkpoint is kept, so epochs past the best one cost time, not quality).
BUDGETED: dict[str, Any] = {"max_train_rows": None, "epochs": 30}


def recipe_for(task: TaskSpec, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full recipe for a task: defaults, then the task's changes, then the caller's."""
    if task.name not in TASK_RECIPES:
        raise ErnieDeployError(
            f"no bootstrap recipe for task {task.name!r}",
            f"add one to TASK_RECIPES in {__name__} (known: {', '.join(sorted(TASK_RECIPES))})",
        )
    recipe = dict(DEFAULT_RECIPE)
    recipe.update(TASK_RECIPES[task.name])
    unknown = sorted(set(overrides or {}) - set(recipe))
    if unknown:
        raise ErnieDeployError(
            f"unknown bootstrap recipe keys: {', '.join(unknown)}", f"use keys of {__name__}.DEFAULT_RECIPE"
        )
    if (overrides or {}).get("budget_minutes"):
        recipe.update(BUDGETED)  # the budget decides how long, not the task's fixed rows and epochs
    recipe.update(overrides or {})
    # Facts of the task that change the result belong to the key too.
    recipe.update(
        task=task.name,
        dataset=task.dataset,
        split_format=task.split_format,
        paddle_class=task.paddle_class,
        max_seq_len=task.max_seq_len,
    )
    return recipe


# --------------------------------------------------------------------------------------------------
# Per kind: everything the training loop needs to know that differs between a label per text and a label
# per token.

IGNORE_INDEX = -100  # label of [CLS], [SEP] and padding: no loss, no score


@dataclass(frozen=True)
class KindRecipe:
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


def _sequence_encode(tokenizer, text, label: str, label2id: dict[str, int], max_seq_len: int):
    """A text, or a (text, text_pair) tuple (`[CLS] a [SEP] b [SEP]`, cut as ErnieTokenizer cuts pairs)."""
    ids = tokenizer(*(text if isinstance(text, tuple) else (text,)), max_length=max_seq_len, truncation=True)[
        "input_ids"
    ]
    if label not in label2id:
        raise ErnieDeployError(f"label {label!r} is not among the train labels", "re-run data preparation")
    return ids, label2id[label]


def _sequence_collate(labels: list, _padded_len: int):
    import numpy as np

    return np.asarray(labels, dtype="int64")


def _sequence_loss(logits, labels):
    import paddle.nn.functional as F

    return F.cross_entropy(logits, labels)


def _accuracy(logits: list, labels: list, _names: list[str]) -> float:
    import numpy as np

    pred = np.concatenate([x.argmax(-1) for x in logits])
    gold = np.concatenate(labels)
    return float((pred == gold).mean()) if len(gold) else 0.0


def _token_encode(tokenizer, text: str, tags: list[str], label2id: dict[str, int], max_seq_len: int):
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


def _token_collate(labels: list, padded_len: int):
    import numpy as np

    out = np.full((len(labels), padded_len), IGNORE_INDEX, dtype="int64")
    for row, seq in enumerate(labels):
        out[row, : len(seq)] = seq
    return out


def _token_loss(logits, labels):
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


def _multi_hot_encode(tokenizer, text: str, labels: list[str], label2id: dict[str, int], max_seq_len: int):
    ids = tokenizer(text, max_length=max_seq_len, truncation=True)["input_ids"]
    unknown = sorted(set(labels) - set(label2id))
    if unknown:
        raise ErnieDeployError(f"labels {unknown} are not among the train labels", "re-run data preparation")
    hot = [0.0] * len(label2id)
    for label in labels:
        hot[label2id[label]] = 1.0
    return ids, hot


def _multi_hot_collate(labels: list, _padded_len: int):
    import numpy as np

    return np.asarray(labels, dtype="float32")


def _multi_label_loss(logits, labels):
    import paddle.nn.functional as F

    return F.binary_cross_entropy_with_logits(logits, labels)


def _micro_f1(logits: list, labels: list, _names: list[str]) -> float:
    """Micro F1 over every (text, label) decision at the untuned threshold 0.5 (logit 0): the model-selection
    signal; the served thresholds are chosen per label on the dev split by `convert`."""
    import numpy as np
    from sklearn.metrics import f1_score

    gold = np.concatenate(labels).astype(int)
    return float(f1_score(gold, (np.concatenate(logits) > 0).astype(int), average="micro", zero_division=0))


KIND_RECIPES: dict[str, KindRecipe] = {
    "sequence": KindRecipe(
        label_list=data_mod.label_names,
        encode=_sequence_encode,
        collate_labels=_sequence_collate,
        loss=_sequence_loss,
        metric=_accuracy,
        metric_name="accuracy",
    ),
    "token": KindRecipe(
        label_list=data_mod.entity_label_names,
        encode=_token_encode,
        collate_labels=_token_collate,
        loss=_token_loss,
        metric=_token_entity_f1,
        metric_name="token-level entity f1",
    ),
    "multi_label": KindRecipe(
        label_list=data_mod.label_set_names,
        encode=_multi_hot_encode,
        collate_labels=_multi_hot_collate,
        loss=_multi_label_loss,
        metric=_micro_f1,
        metric_name="micro f1 (threshold 0.5)",
    ),
}
