"""How an embedding checkpoint is read: which of its forms it is, how that form pools its vector, and the layer the
static model is saved from.

- RocketQA's ErnieEncoder (one tower of paddlenlp's ErnieDualEncoder, saved with save_pretrained; its encoder under
  `ernie.`): the [CLS] hidden state, through `emb_reduce_linear` where the checkpoint has one, not normalized, as
  ErnieDualEncoder.get_pooled_embedding reads it.
- The neural-search recipe's saved state (SemanticIndexBase: its encoder under `ptm.`): the pooled output, through
  `emb_reduce_linear` where it has one, L2-normalized, as that recipe's get_pooled_embedding reads it. The recipe
  saves the weights alone: config.json and vocab.txt of the ERNIE it started from go beside them.
- A plain ErnieModel (no prefix): `--pooling cls` (the default: the [CLS] hidden state), `pooled` (the pooler's tanh
  output) or `mean` (the mean of the real tokens' hidden states), recorded with the model.
- A static model whose output is [batch, dim] is served as it is.
"""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.export.encoders import encoder_prefix, ernie_model, linear, read_state, under
from ernie_deploy.export.kind_export import KindExport
from ernie_deploy.export.static_probe import static_output_shape
from ernie_deploy.kinds.embed import DEFAULT_POOLING, POOLINGS

PROJECTION = "emb_reduce_linear."
# The pooling each saved form reads its vector with, and whether it normalizes it, by its encoder's prefix.
FORMS = {
    "ernie.": ("RocketQA's ErnieEncoder", "cls", False),
    "ptm.": ("the neural-search recipe's SemanticIndexBase", "pooled", True),
}


def facts(checkpoint, *, pooling: str | None = None, **options) -> dict:
    """The record's pooling, normalization and dimension for `checkpoint`; a --pooling the form does not read is
    refused by name."""
    if pooling is not None and pooling not in POOLINGS:
        raise BadOptionsError(f"--pooling {pooling!r} is not a pooling", f"use one of {', '.join(POOLINGS)}")
    if checkpoint.kind == "static":
        if pooling is not None:
            raise BadOptionsError(
                f"--pooling sets how an encoder's vector is pooled; {checkpoint.root} is a static model, whose graph "
                "pools its own",
                "drop --pooling",
            )
        shape = static_output_shape(checkpoint.model_file, checkpoint.params_file)
        if len(shape) != 2:
            raise BadCheckpointError(
                f"{checkpoint.root} is a static model that answers {list(shape)} for one text, not [batch, dim]",
                "export the embedding model so that it answers one vector per text (paddle.jit.save of a layer "
                "returning [batch, dim])",
            )
        return {"pooling": None, "normalized": None, "dim": int(shape[-1])}
    state = read_state(checkpoint.root)
    prefix = encoder_prefix(state, checkpoint.root)
    config = checkpoint.model_config()
    if prefix in FORMS:
        form, own, normalized = FORMS[prefix]
        if pooling not in (None, own):
            raise BadOptionsError(
                f"{checkpoint.root} is {form}, which reads its vector as `{own}`; --pooling {pooling} would serve "
                "other vectors than it was trained to give",
                "drop --pooling",
            )
        pooling = own
    else:
        normalized = False
        pooling = pooling or DEFAULT_POOLING
    projection = state.get(PROJECTION + "weight")
    dim = int(projection.shape[1]) if projection is not None else int(config["hidden_size"])
    return {"pooling": pooling, "normalized": normalized, "dim": dim}


def layer(root: str | Path, record: dict):
    """The embedding layer of the checkpoint at `root`, as `facts` read it: forward(input_ids, token_type_ids) ->
    float32 [batch, dim]."""
    import paddle
    import paddle.nn.functional as F

    state = read_state(root)
    prefix = encoder_prefix(state, root)
    encoder = ernie_model(root, under(state, prefix))
    projection = linear(state, PROJECTION, f"{PROJECTION}* of {root}") if PROJECTION + "weight" in state else None
    pooling, normalized = record["pooling"], bool(record["normalized"])
    pad_id = int(encoder.config.pad_token_id or 0)

    class Embedding(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.projection = projection

        def forward(self, input_ids, token_type_ids):
            sequence, pooled = self.encoder(input_ids, token_type_ids=token_type_ids)
            if pooling == "cls":
                vector = sequence[:, 0]
            elif pooling == "pooled":
                vector = pooled
            else:  # the mean over the real tokens: padding (the pad id) left out
                mask = paddle.cast(input_ids != pad_id, sequence.dtype).unsqueeze(-1)
                vector = (sequence * mask).sum(axis=1) / paddle.clip(mask.sum(axis=1), min=1.0)
            if self.projection is not None:
                vector = self.projection(vector)
            if normalized:
                vector = F.normalize(vector, p=2, axis=-1)
            return vector

    model = Embedding()
    model.eval()
    return model


# What the export reads of this kind (listed in export.static).
EXPORT = KindExport(facts=facts, layer=layer, options=("pooling",))
