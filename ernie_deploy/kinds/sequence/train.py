"""How a label per text is trained: one label id per text (or pair), cross entropy, accuracy on dev."""

from __future__ import annotations

from ernie_deploy.core.errors import BadDataError
from ernie_deploy.fetch import data as data_mod
from ernie_deploy.train.kind_recipe import KindRecipe


def _pair_ids(tokenizer, first: str, second: str) -> list[int]:
    """`[CLS] a [SEP] b [SEP]` cut to the tokenizer's length as ErnieTokenizer cuts a pair: a token at a time from
    the end of the longer text, and from the second where the two are as long (the Rust tokenizer's own pair cut
    takes from the first there: other rows)."""
    most = tokenizer.truncation["max_length"]
    a, b = (tokenizer.encode(t, add_special_tokens=False).ids for t in (first, second))
    for _ in range(len(a) + len(b) + 3 - most):
        (a if len(a) > len(b) else b).pop()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    return [cls, *a, sep, *b, sep]


def _sequence_encode(tokenizer, text, label: str, label2id: dict[str, int]):
    """A text, or a (text, text_pair) tuple (`[CLS] a [SEP] b [SEP]`, cut as ErnieTokenizer cuts pairs)."""
    ids = _pair_ids(tokenizer, *text) if isinstance(text, tuple) else tokenizer.encode(text).ids
    if label not in label2id:
        raise BadDataError(f"label {label!r} is not among the train labels", "re-run data preparation")
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


RECIPE = KindRecipe(
    label_list=data_mod.label_names,
    encode=_sequence_encode,
    collate_labels=_sequence_collate,
    loss=_sequence_loss,
    metric=_accuracy,
    metric_name="accuracy",
)
