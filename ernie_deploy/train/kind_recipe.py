"""What the training loop needs to know that differs between kinds of task (each kind's is its own:
ernie_deploy/kinds/<kind>/train.py, collected in train.recipes.KIND_RECIPES).

paddle is imported inside the kinds' functions: importing ernie_deploy stays paddle-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

IGNORE_INDEX = -100  # label of [CLS], [SEP] and padding: no loss, no score


@dataclass(frozen=True)
class KindRecipe:
    metric_name: str
    # (out, task, data dir, full recipe, base checkpoint) -> the run's record: a kind whose training is a run of its
    # own (retrieval: its loss reads a batch of pairs, not labels: train.retrieval), which saves its model and
    # tokenizer into `out` (train.loop completes the record into META_FILE). None: the shared loop (train.loop) trains
    # it with the functions below, which such a kind leaves out.
    run: Callable[..., dict] | None = None
    # train labels -> ordered label names (ids are the positions)
    label_list: Callable[[list], list[str]] | None = None
    # (tokenizer, text, label, label2id) -> (input_ids, encoded label); the tokenizer is train.vocab.training_tokenizer
    # (a `tokenizers.Tokenizer` that cuts to the model's length)
    encode: Callable[..., tuple[list[int], Any]] | None = None
    # list of encoded labels, padded length -> numpy array for the batch
    collate_labels: Callable[[list, int], Any] | None = None
    # (logits, labels tensor) -> scalar loss tensor
    loss: Callable[[Any, Any], Any] | None = None
    # (list of logits arrays per batch, list of label arrays per batch, label names) -> metric in [0, 1]
    metric: Callable[[list, list, list[str]], float] | None = None
    # (encoded train rows, most tokens a row) -> rows that pack consecutive ones, [CLS] and [SEP] once per row;
    # None: a kind whose answer is one per text cannot join texts (the recipe's `pack_tokens` is refused there)
    pack: Callable[[list, int], list] | None = None
    # (tokenizer, text, label, label2id) -> the rows of one text, for a kind that reads a text as several rows (UIE:
    # one per prompt, each row's label then being what `encode` takes for it); None: the one row `encode` gives
    expand: Callable[..., list] | None = None
    # (encoded train rows, full recipe) -> the rows trained on (UIE: a seeded share of its negative rows, the recipe's
    # `negative_rows`); None: all of them
    thin: Callable[[list, dict], list] | None = None
    # label names -> entries added to the saved checkpoint's config.json (keys paddlenlp ignores); None: none
    config_extra: Callable[[list[str]], dict] | None = None


def text_rows(kind: KindRecipe, tokenizer, text, label, label2id: dict[str, int]) -> list:
    """The encoded rows of one text: the one `kind.encode` gives, or those of `kind.expand`."""
    if kind.expand is None:
        return [kind.encode(tokenizer, text, label, label2id)]
    return kind.expand(tokenizer, text, label, label2id)
