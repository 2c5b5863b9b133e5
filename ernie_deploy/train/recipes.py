"""Bootstrap recipes: the numbers each task trains with, and what training does differently per kind of task.

A task's recipe is DEFAULT_RECIPE, then that task's changes (TASK_RECIPES, keyed by task name), then the
caller's; together with the task's own facts it goes into the cache key. How labels are read, encoded, batched,
scored and turned into a loss depends only on the task's kind (KIND_RECIPES, keyed by `TaskSpec.kind`; each
kind's recipe is in ernie_deploy/kinds/<kind>/train.py, and is not part of the cache key).
"""

from __future__ import annotations

from typing import Any

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, TaskSpec
from ernie_deploy.kinds import layer_table
from ernie_deploy.kinds.embed.train import RECIPE as EMBED
from ernie_deploy.kinds.multi_label.train import RECIPE as MULTI_LABEL
from ernie_deploy.kinds.rerank.train import RECIPE as RERANK
from ernie_deploy.kinds.sequence.train import RECIPE as SEQUENCE
from ernie_deploy.kinds.token.train import RECIPE as TOKEN
from ernie_deploy.kinds.uie.train import RECIPE as UIE
from ernie_deploy.train.kind_recipe import KindRecipe

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
    # The shipped classifier (demo/seq_cls, its manifest holds the scores): 16 epochs, [UNK] dropout 0.15, dev 0.814
    # at the last epoch, test 0.837, 34.7 min on one core of the shared 2-core host. The same shape starting from the
    # tagger's encoder (init_from token_cls, feed-forward 512, 8 epochs) reached dev 0.819 and test 0.810: within
    # dev's noise of each other (1,000 titles), and the random start keeps the classifier apart from the tagger.
    "seq_cls": {"epochs": 16, "token_dropout": 0.15},
    # Pairs start from the classifier, whose encoder already tells the classes apart; the pair head learns to
    # compare two titles. From the shipped classifier (dev accuracy per epoch, 250 steps each): 0.672 / 0.690 / 0.718 /
    # 0.770 / 0.763, test 0.772.
    "pair_cls": {"init_from": "seq_cls", "epochs": 5},
    # The shipped tagger (demo/token_cls): every train sentence, consecutive ones packed into rows of up to 64 tokens
    # (39,792 rows: a lone long sentence, or two or three short ones, as a served window holds them), 4 epochs, dev
    # entity F1 over word pieces 0.627 / 0.762 / 0.807 / 0.826, served test F1 0.7712, 62 min (one core, then two).
    # No dropout: the model underfits this data (its training loss still falls at the last epoch). A feed-forward of
    # 512 instead of 1,024 runs the step 1.40-1.46x as fast on one core at equal F1 (back to back, batches of 32 x 46
    # tokens). The title classifier's encoder holds little a tagger can use: started from it, a tagger's training loss
    # was no lower at equal steps.
    "token_cls": {
        "intermediate_size": 512,
        "max_train_rows": None,
        "pack_tokens": 64,
        "epochs": 4,
        "learning_rate": 1e-3,
        "token_dropout": 0.0,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
    # Which entity types a sentence holds: the token_cls encoder already tells entities apart, so one pass over a
    # subset teaches the new head (the shape must stay token_cls's, whose encoder it loads). From the shipped tagger,
    # 32,000 rows (1,000 steps, 24 min on a busy host): dev micro F1 0.9107, test 0.8992 (demo/multi_label).
    "multi_label": {
        "init_from": "token_cls",
        "intermediate_size": 512,  # token_cls's shape
        "max_train_rows": 32000,
        "epochs": 1,
        "learning_rate": 5e-4,
        "token_dropout": 0.0,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
    # Entity extraction as UIE reads it (one row per text and entity type, kinds/uie/train.py): the token_cls
    # encoder already marks MSRA's entities, so the pointer heads and the prompt (token type 1 for the text, which the
    # tagger never saw) are what a short run teaches; token_cls's shape, whose encoder it loads. No [UNK] dropout: it
    # would hide the prompt, the only thing that tells a row's type. 82% of the rows hold no entity of their type;
    # keeping 35% of those doubles the share of rows that teach a span. From the shipped tagger, 24,000 texts (1,198
    # steps, 30 min on a busy host): dev span F1 0.8226 at the served threshold 0.5, test 0.7450 (demo/uie). At lr 1e-3
    # a run of all rows that stopped at 302 steps scored 0.03, so the recipe runs its steps whatever the host's speed
    # (no time budget).
    "uie": {
        "init_from": "token_cls",
        "intermediate_size": 512,  # token_cls's shape
        "max_train_rows": 24000,
        "negative_rows": 0.35,
        "epochs": 1,
        "learning_rate": 1e-3,
        "token_dropout": 0.0,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
    # Retrieval (kinds/embed/train.py, kinds/rerank/train.py, train.retrieval) on InsuranceQA's pairs: each starts from
    # a trained encoder (its shape and vocabulary; the shape entries above are its base's), without [UNK] dropout.
    # The embed model: the classifier's encoder, one epoch of in-batch negatives over the 21,325 train pairs (334
    # steps of 64 pairs at 128 tokens); a softmax temperature of 0.05 on cosines, as dense retrievers commonly train.
    "embed": {
        "init_from": "seq_cls",
        "epochs": 1,
        "batch_size": 64,
        "learning_rate": 1e-3,
        "temperature": 0.05,
        "token_dropout": 0.0,
        "bucket_batches": 20,
        "eval_batch_size": 128,
    },
    # The rerank model: the embed model's encoder, one epoch over a seeded 6,000 of the 12,195 train questions, each
    # with one of its answers, 2 hard negatives drawn from the embed model's top 20 and 1 random answer (24,000 rows,
    # 750 steps: a cross-encoder step of 32 pairs costs about half the embed model's of 64 pairs in two towers); the
    # epoch is chosen on the first 400 dev questions' top 20 re-ordered.
    "rerank": {
        "init_from": "embed",
        "epochs": 1,
        "batch_size": 32,
        "learning_rate": 5e-4,
        "hard_negatives": 2,
        "random_negatives": 1,
        "questions_per_epoch": 6000,
        "dev_queries": 400,
        "token_dropout": 0.0,
        "bucket_batches": 20,
        "eval_batch_size": 128,
    },
}


# With a training budget, the run is as long as the budget allows: every train row, up to this many epochs (the
# best dev checkpoint is kept, so epochs past the best one cost time, not quality).
BUDGETED: dict[str, Any] = {"max_train_rows": None, "epochs": 30}


# Recipe entries a task's recipe may leave out (absent: off), so that adding one keeps every cache key that does not
# use it: rows that pack consecutive train texts up to this many tokens (KindRecipe.pack); the share of UIE's
# negative train rows kept (KindRecipe.thin).
OPTIONAL = ("pack_tokens", "negative_rows")


def recipe_for(task: TaskSpec, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full recipe for a task: defaults, then the task's changes, then the caller's."""
    if task.name not in TASK_RECIPES:
        raise BadOptionsError(
            f"no bootstrap recipe for task {task.name!r}",
            f"add one to TASK_RECIPES in {__name__} (known: {', '.join(sorted(TASK_RECIPES))})",
        )
    recipe = dict(DEFAULT_RECIPE)
    recipe.update(TASK_RECIPES[task.name])
    unknown = sorted(set(overrides or {}) - set(recipe) - set(OPTIONAL))
    if unknown:
        raise BadOptionsError(
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
        max_seq_len=DEFAULT_MAX_SEQ_LEN,  # the length every bootstrap trains and exports with
    )
    return recipe


# The training layer's table of the kinds: everything the training loop needs to know that differs between a label
# per text, a label per token and a set of labels per text (ernie_deploy/kinds/<kind>/train.py), by the kind's name. A
# kind is one import above and one line here.
KIND_RECIPES: dict[str, KindRecipe] = layer_table(
    "train",
    __name__,
    {
        "embed": EMBED,
        "multi_label": MULTI_LABEL,
        "rerank": RERANK,
        "sequence": SEQUENCE,
        "token": TOKEN,
        "uie": UIE,
    },
)
