"""The postprocess steps: a model's logits -> what the client reads (a label, entities, label sets), as the
ensemble's last python model. Each kind's step is its own (ernie_deploy/kinds/<kind>/serving.py); each answers in the
wire its config names (serving.wire)."""

from __future__ import annotations

from ernie_deploy.kinds import KINDS, table
from ernie_deploy.serving.watch import watched
from ernie_deploy.serving.wire import in_wire

_STEPS = table("serving", "POSTPROCESS", key=lambda kind: kind.postprocess)
_FORMATS = table("serving", "PADDLENLP_FORMATS", key=lambda kind: kind.postprocess)
# Each kind's part of the watch (serving.watch), by the kind's name.
WATCHES = table("serving", "WATCH")

# The postprocess a TaskSpec names (its kind's `postprocess`), by its key in serving.steps.STEPS: watched (what it
# answers, counted: serving.watch) under the task's own names, then written in the model's wire.
POSTPROCESS_STEPS = {
    kind.postprocess: in_wire(watched(_STEPS[kind.postprocess], WATCHES[kind.name]), _FORMATS[kind.postprocess])
    for kind in KINDS.values()
}
