"""The postprocess steps: a model's logits -> what the client reads (a label, entities, label sets), as the
ensemble's last python model. Each kind's step is its own (ernie_deploy/kinds/<kind>/serving.py)."""

from __future__ import annotations

from ernie_deploy.kinds import table

# The postprocess a TaskSpec names (its kind's `postprocess`), by its key in serving.steps.STEPS.
POSTPROCESS_STEPS = table("serving", "POSTPROCESS", key=lambda kind: kind.postprocess)
