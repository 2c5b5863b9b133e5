"""How a label per token is trained: the tag of each word piece's first character, cross entropy over real tokens,
entity F1 over word pieces on dev."""

from __future__ import annotations

from ernie_deploy.core.errors import BadDataError
from ernie_deploy.fetch import data as data_mod
from ernie_deploy.serving.entities import char_labels_to_token_labels
from ernie_deploy.train.kind_recipe import IGNORE_INDEX, KindRecipe


def _token_encode(tokenizer, text: str, tags: list[str], label2id: dict[str, int]):
    """Word pieces with one label each: the tag of the piece's first character ([CLS]/[SEP] ignored)."""
    import numpy as np

    enc = tokenizer.encode(text)
    unknown = set(tags) - set(label2id)
    if unknown:
        raise BadDataError(f"tags {sorted(unknown)} are not among the train tags", "re-run data preparation")
    offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
    return enc.ids, char_labels_to_token_labels(tags, offsets, len(enc.ids), label2id).tolist()


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


def _token_pack(rows: list, most: int) -> list:
    """Consecutive sentences joined into rows of at most `most` tokens, [CLS] and [SEP] included, as a served model
    reads a long text (serving.windows.sentence_windows packs whole sentences the same way): a model trained on
    sentences alone reads a window of several at 0.55 entity F1 against 0.674 for one sentence a window (the demo
    NER model, msra_docs, windows up to 128 tokens against 28). A row longer than `most` stays alone."""
    packed: list = []
    ids: list[int] = []
    labels: list[int] = []
    for row_ids, row_labels in rows:
        if ids and len(ids) + len(row_ids) - 2 > most:
            packed.append((ids, labels))
            ids, labels = [], []
        if not ids:
            ids, labels = list(row_ids), list(row_labels)
        else:  # in front of the open row's [SEP], without this row's [CLS] and [SEP]
            ids[-1:-1] = row_ids[1:-1]
            labels[-1:-1] = row_labels[1:-1]
    if ids:
        packed.append((ids, labels))
    return packed


RECIPE = KindRecipe(
    label_list=data_mod.entity_label_names,
    encode=_token_encode,
    collate_labels=_token_collate,
    loss=_token_loss,
    metric=_token_entity_f1,
    metric_name="token-level entity f1",
    pack=_token_pack,
)
