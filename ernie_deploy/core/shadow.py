"""A shadow evaluation's facts shared by the server side (the serving step that mirrors requests, serving/watch.py)
and the operator's side (operate/shadow.py, `rollout --shadow`, `stats`): the config parameter that turns it on, the
series it exports, and its defaults.

While a model's candidate version is shadowed, the step that answers for the serving version sends a share of its
requests to the candidate as well, after its own answers are on their way, and counts whether the two agree. The
candidate's answers are compared and dropped; no client ever reads one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ernie_deploy.core.errors import BadOptionsError

# The config parameter of the answering step that holds a ShadowPlan as JSON; absent: no shadow.
SHADOW_PARAMETER = "shadow"

# Texts compared, by outcome: agree, disagree, failed (the candidate erred, timed out or was gone), skipped (the
# mirror's queue was full: the candidate fell behind and the text was not sent).
SHADOW_METRIC = "ernie_deploy_shadow_total"
SHADOW_OUTCOMES = ("agree", "disagree", "failed", "skipped")
# Texts per (serving answer, candidate answer) of a classifier: the label-flip table (its diagonal included).
SHADOW_FLIPS_METRIC = "ernie_deploy_shadow_flips_total"
# The candidate's latency per mirrored request, as a Prometheus histogram made of counters (`_bucket` with `le`,
# `_sum`, `_count`), so histogram_quantile reads it.
SHADOW_LATENCY_METRIC = "ernie_deploy_shadow_candidate_seconds"
SHADOW_LATENCY_EDGES = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

# A tenth of the traffic: enough to measure agreement to about a point in a few minutes of a few hundred texts a
# second, and about a tenth of the throughput (what the candidate's runs take from the serving version's cores).
DEFAULT_FRACTION = 0.1
# How long the mirror waits for the candidate before it counts the request as failed.
DEFAULT_TIMEOUT_S = 5.0
# Requests waiting to be mirrored; past this the candidate has fallen behind and requests are skipped, not queued
# without bound.
MIRROR_QUEUE = 256


@dataclass(frozen=True)
class ShadowPlan:
    """What the serving step mirrors: `fraction` of its requests to `candidate` (a Triton model), with their texts
    (`sends` "text": the candidate is an entry such as the canary, asked in the model's wire, at the version it serves)
    or with the step's own inputs ("step": the candidate is the same step, asked at `version`). `version` is always
    the candidate's version number: the series' `candidate` label."""

    model: str  # the served model's name (the series' `model` label)
    serving_version: int  # the version whose step mirrors; its other versions do not
    candidate: str
    version: int
    fraction: float = DEFAULT_FRACTION
    sends: str = "text"
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self):
        check_fraction(self.fraction)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ShadowPlan:
        return cls(**json.loads(text))


def check_fraction(fraction: float) -> float:
    if not 0.0 < float(fraction) <= 1.0:
        raise BadOptionsError(
            f"--fraction {fraction} is not a share of the requests",
            "give a number above 0 and at most 1 (0.1: a tenth)",
        )
    return float(fraction)
