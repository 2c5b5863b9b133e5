"""How PaddleNLP SimpleServing serves a label per text, for the peer rows of the benchmark."""

from __future__ import annotations

# The PaddleNLP handlers (names in paddlenlp.server.handlers): model handler, post handler. A kind without a peer
# module gets no peer row: a token model's handler (TokenClsModelHandler) returns raw logits with no post handler
# to turn them into entities, so its answers could not be compared with ours.
HANDLERS = ("CustomModelHandler", "MultiClassificationPostHandler")
