"""The postprocess steps: a model's logits -> what the client reads (a label, entities, label sets), as the
ensemble's last python model. Each kind's step is its own (ernie_deploy/kinds/<kind>/serving.py); each answers in the
wire its config names (serving.wire)."""

from __future__ import annotations

from ernie_deploy.kinds import KINDS, layer_table
from ernie_deploy.kinds.embed.serving import SERVING as EMBED
from ernie_deploy.kinds.multi_label.serving import SERVING as MULTI_LABEL
from ernie_deploy.kinds.rerank.serving import SERVING as RERANK
from ernie_deploy.kinds.sequence.serving import SERVING as SEQUENCE
from ernie_deploy.kinds.token.serving import SERVING as TOKEN
from ernie_deploy.kinds.uie.serving import SERVING as UIE
from ernie_deploy.serving.kind_serving import KindServing
from ernie_deploy.serving.watch import watched
from ernie_deploy.serving.wire import in_wire

# The serving layer's table of the kinds: what it reads of each (kinds/<kind>/serving.py), by the kind's name. A kind
# is one import above and one line here.
KIND_SERVING: dict[str, KindServing] = layer_table(
    "serving",
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
# Each kind's part of the watch (serving.watch), by the kind's name.
WATCHES = {name: serving.watch for name, serving in KIND_SERVING.items()}

# The postprocess a TaskSpec names (its kind's `postprocess`), by its key in serving.steps.STEPS: watched (what it
# answers, counted: serving.watch) under the task's own names, then written in the model's wire.
POSTPROCESS_STEPS = {
    KINDS[name].postprocess: in_wire(watched(serving.postprocess, serving.watch), serving.paddlenlp_formats)
    for name, serving in KIND_SERVING.items()
}
