"""How a rerank checkpoint is read: an encoder under `ernie.` with a classifier over its pooled output, of 1 or 2
labels: RocketQA's cross-encoder (paddlenlp's ErnieEncoder with a 2-label classifier, read as
ErnieCrossEncoder.matching reads it) or an ErnieForSequenceClassification. Either way the graph answers one logit
per pair, the log-odds that the text answers the query: a 2-label head's logit of label 1 less that of label 0 (its
sigmoid is the softmax probability of label 1), a 1-label head's logit as it is. The postprocess step makes it the
score the record names (kinds/rerank/serving.py)."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.export.encoders import encoder_prefix, ernie_model, linear, read_state, under
from ernie_deploy.export.kind_export import KindExport
from ernie_deploy.kinds.rerank import DEFAULT_SCORE, SCORES

CLASSIFIER = "classifier."


def facts(checkpoint, *, score: str | None = None, **options) -> dict:
    """The record's scoring (`score`: what the score output is) for `checkpoint`, whose head is checked to be one the
    kind reads."""
    if score is not None and score not in SCORES:
        raise BadOptionsError(f"--score {score!r} is not a score", f"use one of {', '.join(SCORES)}")
    if checkpoint.kind == "static":
        raise BadCheckpointError(
            f"{checkpoint.root} is a static model; a rerank model is read from its dygraph checkpoint, whose head "
            "says what its logits mean",
            "convert the checkpoint saved with save_pretrained (config.json, model_state.pdparams, vocab.txt)",
        )
    state = read_state(checkpoint.root)
    _head_size(state, checkpoint.root)
    return {"scoring": score or DEFAULT_SCORE}


def _head_size(state: dict, root) -> int:
    prefix = encoder_prefix(state, root)
    weight = state.get(CLASSIFIER + "weight")
    if prefix != "ernie." or weight is None:
        raise BadCheckpointError(
            f"{root} has no classifier over an ERNIE encoder (ernie.* and classifier.*): it is not a cross-encoder",
            "convert a cross-encoder: paddlenlp's ErnieEncoder with a 2-label classifier (RocketQA's "
            "ErnieCrossEncoder) or an ErnieForSequenceClassification of 1 or 2 labels",
        )
    labels = int(weight.shape[1])
    if labels not in (1, 2):
        raise BadCheckpointError(
            f"{root}'s classifier has {labels} labels; a relevance score comes from 1 label (its logit) or 2 "
            "(relevant or not)",
            "convert it as a classifier (--task seq_cls or pair_cls), or convert a 1- or 2-label cross-encoder",
        )
    return labels


def layer(root: str | Path, record: dict):
    """The scoring layer of the checkpoint at `root`: forward(input_ids, token_type_ids) -> float32 [batch, 1]."""
    import paddle

    state = read_state(root)
    labels = _head_size(state, root)
    encoder = ernie_model(root, under(state, "ernie."))
    classifier = linear(state, CLASSIFIER, f"the classifier of {root}")

    class Relevance(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.classifier = classifier

        def forward(self, input_ids, token_type_ids):
            _, pooled = self.encoder(input_ids, token_type_ids=token_type_ids)
            logits = self.classifier(pooled)  # dropout before it is the identity in eval mode
            if labels == 2:
                return logits[:, 1:2] - logits[:, 0:1]
            return logits

    model = Relevance()
    model.eval()
    return model


# What the export reads of this kind (listed in export.static).
EXPORT = KindExport(facts=facts, layer=layer, options=("score",))
