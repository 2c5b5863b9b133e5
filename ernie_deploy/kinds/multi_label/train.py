"""How a set of labels per text is trained: a multi-hot vector per text, binary cross entropy per label, micro F1
at the untuned threshold on dev."""

from __future__ import annotations

from ernie_deploy.core.errors import BadDataError
from ernie_deploy.fetch import data as data_mod
from ernie_deploy.train.kind_recipe import KindRecipe


def _multi_hot_encode(tokenizer, text: str, labels: list[str], label2id: dict[str, int]):
    ids = tokenizer.encode(text).ids
    unknown = sorted(set(labels) - set(label2id))
    if unknown:
        raise BadDataError(f"labels {unknown} are not among the train labels", "re-run data preparation")
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


RECIPE = KindRecipe(
    label_list=data_mod.label_set_names,
    encode=_multi_hot_encode,
    collate_labels=_multi_hot_collate,
    loss=_multi_label_loss,
    metric=_micro_f1,
    metric_name="micro f1 (threshold 0.5)",
)
