"""The postprocess step of a vector per text: the model's pooled vector, answered as it is (FP32 [dim] per text)."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.tasks import LOGITS
from ernie_deploy.serving.kind_serving import KindServing
from ernie_deploy.serving.step import Step, split_rows
from ernie_deploy.serving.watch import KindWatch

EMBEDDING = "embedding"


class EmbedPostprocess(Step):
    """The model's one output (the pooled vector, under the pipeline's name `logits`) [B, dim] -> embedding FP32
    [B, dim]. Not normalized here: a checkpoint that normalizes (the neural-search recipe's) does it in its graph, and
    the gateway's routes normalize where their contract says (TEI's `normalize`, OpenAI's unit vectors)."""

    def __init__(self, config: dict, version_dir):
        pass

    def check(self, inputs):
        vectors = inputs[LOGITS]
        if vectors.ndim != 2:
            raise BadRequest(
                f"the model answered vectors of shape {list(vectors.shape)}, not [texts, dim]",
                "convert the checkpoint again with --task embed, whose graph answers one vector per text",
            )
        return vectors

    def run(self, items, requested=None):
        vectors = np.concatenate(items).astype(np.float32)
        return [{EMBEDDING: vectors[rows]} for rows in split_rows([len(i) for i in items])]


def _answers(outputs: dict, labels: list[str]) -> list[tuple[float, ...]]:
    vectors = np.asarray(outputs[EMBEDDING], dtype=np.float32)
    vectors = vectors.reshape(len(vectors), -1)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    # A vector's direction is what a search compares: two answers agree where their unit vectors agree to 2 places.
    units = np.round(vectors / np.maximum(norms, 1e-12), 2)
    return [tuple(row.tolist()) for row in units]


# What a vector per text is to the watch (serving.watch): no series of its own beside each text's length and reading
# (a vector has no label to count); two answers agree where their directions do.
WATCH = KindWatch(series=(), needs=(EMBEDDING,), read=_answers, profile=lambda answer: [], key=lambda answer: answer)

# What the serving layer reads of this kind (listed in serving.postprocess_steps). A vector has no PaddleNLP wire.
SERVING = KindServing(postprocess=EmbedPostprocess, watch=WATCH)
