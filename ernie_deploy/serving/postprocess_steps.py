"""The postprocess steps: a model's logits -> what the client reads (a label, entities, label sets), as the
ensemble's last python model. Each kind's step is its own (ernie_deploy/kinds/<kind>/serving.py); each answers in the
wire its config names (serving.wire)."""

from __future__ import annotations

from ernie_deploy.kinds import table
from ernie_deploy.serving.wire import in_wire

_STEPS = table("serving", "POSTPROCESS", key=lambda kind: kind.postprocess)
_FORMATS = table("serving", "PADDLENLP_FORMATS", key=lambda kind: kind.postprocess)

# The postprocess a TaskSpec names (its kind's `postprocess`), by its key in serving.steps.STEPS.
POSTPROCESS_STEPS = {key: in_wire(step, _FORMATS[key]) for key, step in _STEPS.items()}
