"""`rollout --shadow`: compare a candidate version with the serving one on live traffic before promoting it.

The candidate is loaded beside the serving version and probed exactly as a rollout does (operate/rollout.py, `Move`).
Then the step that answers for the serving version (`Layout.answering`) gets a `ShadowPlan` in its config (the
`shadow` parameter, core.shadow) and is reloaded: it mirrors a share of its requests to the candidate from a
background thread and counts, on the server's /metrics, whether the two answered alike (serving/watch.py). No client
ever waits for or reads a candidate's answer. This side polls those counts until enough texts were compared or the
time is up, reports them, takes the shadow off again, and promotes the candidate with the rollout's switch, or, where
its agreement is below what the operator asked for, takes it away as a failed rollout does.

Whatever happens, the `shadow` parameter is gone from every config when this returns or raises: a server restarted
later must not keep mirroring.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.client.admin import RepositoryAdmin
from ernie_deploy.client.metrics import Sample, ShadowSummary, scrape, shadow_summary
from ernie_deploy.core.endpoints import DEFAULT_METRICS_URL
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, ErnieDeployError
from ernie_deploy.core.profile import WATCHED_MODEL_PARAMETER
from ernie_deploy.core.shadow import DEFAULT_FRACTION, SHADOW_PARAMETER, ShadowPlan, check_fraction
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TOKENIZER_STEP
from ernie_deploy.operate.rollout import PROBE_TEXTS, Move
from ernie_deploy.repository.configs import parse

# How long a shadow runs when neither --duration nor --requests is given. A minute at the default tenth of a few
# hundred texts a second compares a few thousand texts: the agreement's standard error is under half a point even at
# 90% agreement (sqrt(0.9 * 0.1 / 2000) = 0.0067), and a rollout waits one minute, not ten.
DEFAULT_DURATION_S = 60.0
# With --requests alone: the bound that ends a shadow whose traffic never comes (the count may never be reached).
REQUESTS_BOUND_S = 600.0
# How often the counts are read: the serving step pushes them to /metrics once a second (serving/metrics.py).
POLL_S = 1.0
# After the answering step is reloaded with the plan, what the step it replaced still had to push lands within one
# push interval; the starting counts are read only after that, so that none of it is taken for the shadow's.
SETTLE_S = 1.5


class ShadowRefused(ErnieDeployError):
    """The candidate was not promoted after its shadow: what was measured is in `report`."""

    report: ShadowReport


@dataclass
class ShadowReport:
    name: str
    serving_version: int
    candidate: int
    fraction: float
    seconds: float = 0.0
    compared: int = 0  # agree + disagree + failed
    agree: int = 0
    disagree: int = 0
    failed: int = 0
    skipped: int = 0
    agreement: float | None = None  # agree / (agree + disagree)
    flips: list[tuple[str, str, int]] = field(default_factory=list)  # (serving label, candidate label, texts)
    candidate_p50_s: float | None = None
    candidate_p95_s: float | None = None
    min_agreement: float | None = None
    promoted: bool = False

    @classmethod
    def of(cls, move: Move, fraction: float, measured: ShadowSummary, seconds: float) -> ShadowReport:
        return cls(
            move.model.name,
            move.current,
            move.to_version,
            fraction,
            round(seconds, 2),
            measured.compared,
            measured.agree,
            measured.disagree,
            measured.failed,
            measured.skipped,
            measured.agreement,
            measured.off_diagonal(),
            measured.quantile(0.5),
            measured.quantile(0.95),
        )

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self, flips: int = 10) -> list[str]:
        agreement = "n/a" if self.agreement is None else f"{self.agreement:.4f}"
        out = [
            f"{self.name}: shadow of version {self.candidate} beside version {self.serving_version} "
            f"({self.fraction:g} of requests, {self.seconds:.1f}s)",
            f"  compared {self.compared} texts: agree {self.agree}, disagree {self.disagree}, failed {self.failed}; "
            f"skipped {self.skipped} (the candidate behind)",
            f"  agreement {agreement}",
        ]
        if self.candidate_p50_s is not None:
            p95 = self.candidate_p95_s or 0.0
            out.append(f"  candidate latency p50 {self.candidate_p50_s * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms")
        if self.flips:
            out.append("  label flips (serving -> candidate: texts):")
            out += [f"    {s} -> {c}: {n}" for s, c, n in self.flips[:flips]]
            if len(self.flips) > flips:
                out.append(f"    ... and {len(self.flips) - flips} more")
        return out


@dataclass(frozen=True)
class ShadowStep:
    """Where the shadow is switched on: the answering step's name, its config as it serves during the move (the
    shadow's is this plus the plan), and the plan."""

    step: str
    config: mc.ModelConfig
    plan: ShadowPlan

    def with_plan(self) -> mc.ModelConfig:
        config = mc.ModelConfig()
        config.CopyFrom(self.config)
        config.parameters[SHADOW_PARAMETER].string_value = self.plan.to_json()
        # A step built without monitoring counts nothing (core.profile.WATCHED_MODEL_PARAMETER names the model it would
        # count for): the shadow turns it on for as long as it runs.
        if WATCHED_MODEL_PARAMETER not in config.parameters:
            config.parameters[WATCHED_MODEL_PARAMETER].string_value = self.plan.model
        return config

    @property
    def candidate(self) -> str:
        """The `candidate` label its series carry: the candidate's version (core.shadow.ShadowPlan)."""
        return str(self.plan.version)


def shadow_step(move: Move, record: ModelSpec, fraction: float) -> ShadowStep:
    """The answering step of the serving version and what it mirrors to, for `move`'s model in its layout; refused
    where that step cannot mirror (not a python step)."""
    model = move.model
    layout = model.layout
    tokenizer = model.entry.ensemble_scheduling.step[0].model_name if layout.shares_tokenizer else TOKENIZER_STEP
    step = layout.answering(record, tokenizer)
    config = model.entry if step == model.name else model.steps.get(step)
    if config is None:
        raise BadRepositoryError(
            f"{model.name}: its answering step {step} is not one of its versioned models ({', '.join(model.steps)})",
            "rebuild the model with this version of ernie-deploy",
        )
    if config.backend != "python":
        raise BadOptionsError(
            f"{model.name} ({layout.name} layout) answers from {step}, which runs on the {config.backend or 'ORT'} "
            "backend: only a python step can mirror requests to a candidate, so it cannot be shadowed",
            f"rebuild {model.name} with --runtime python (or --layout ensemble) to shadow it, or roll out without "
            "--shadow",
        )
    # As it serves without the shadow, rendered from the records (VersionedModel.pinned): the entry the serving
    # version's, a versioned step, which holds both versions during the move, the candidate's.
    config = move.both_versions(step) if step != model.name else model.pinned(move.current)
    if layout.answers_in_graph:
        # The answering step is the model itself, fed token ids: it sends its own inputs to its other version.
        plan = ShadowPlan(model.name, move.current, step, move.to_version, fraction, sends="step")
    else:
        # The canary answers with the candidate from text, through the model's own entry.
        plan = ShadowPlan(model.name, move.current, model.canary, move.to_version, fraction, sends="text")
    return ShadowStep(step, config, plan)


def shadow_rollout(
    repository,
    name: str,
    to_version: int,
    admin: RepositoryAdmin,
    probe: Callable[[ModelSpec, Sequence[str]], None],
    *,
    fraction: float = DEFAULT_FRACTION,
    duration_s: float | None = None,
    requests: int | None = None,
    min_agreement: float | None = None,
    metrics_url: str = DEFAULT_METRICS_URL,
    probe_texts: Sequence[str] = PROBE_TEXTS,
    log: Callable[[str], None] = lambda line: None,
    read_metrics: Callable[[str], list[Sample]] = scrape,
    poll_s: float = POLL_S,
) -> ShadowReport:
    """Shadow `to_version` of served model `name` beside its serving version, then promote it (the rollout's switch)
    unless its agreement is below `min_agreement` or nothing was compared, in which case it is taken away again and
    an ErnieDeployError says why. The shadow ends after `requests` texts were compared or `duration_s` seconds,
    whichever comes first (neither given: DEFAULT_DURATION_S)."""
    fraction = check_fraction(fraction)
    duration_s, requests = _limits(duration_s, requests, min_agreement)
    move = Move.begin(repository, name, to_version, admin, probe_texts, log)
    shadow = shadow_step(move, move.served, fraction)  # refused before anything is loaded
    read_metrics(metrics_url)  # an unreachable /metrics, too
    move.load_candidate(probe, probe_texts)
    done = False
    try:
        measured, seconds = _shadow(move, shadow, duration_s, requests, metrics_url, read_metrics, poll_s)
        shadow_off(move, shadow)
        done = True
    finally:
        if not done:  # a failure, or an interrupt: the shadow off and the candidate away, what can be done of it
            shadow_off(move, shadow, quiet=True)
            move.undo()
            _sweep(move)
    report = ShadowReport.of(move, fraction, measured, seconds)
    report.min_agreement = min_agreement
    for line in report.lines():
        log(line)
    refusal = _refusal(report)
    if refusal is not None:
        refusal.report = report
        move.undo()
        _sweep(move)
        raise refusal
    try:
        move.switch()
    finally:
        _sweep(move)
    report.promoted = True
    return report


def _limits(duration_s: float | None, requests: int | None, min_agreement: float | None) -> tuple[float, int | None]:
    if duration_s is not None and duration_s <= 0:
        raise BadOptionsError(f"--duration {duration_s:g} is not a time", "give seconds above 0 (e.g. --duration 60)")
    if requests is not None and requests <= 0:
        raise BadOptionsError(f"--requests {requests} is not a count", "give a number of texts above 0")
    if min_agreement is not None and not 0.0 <= min_agreement <= 1.0:
        raise BadOptionsError(
            f"--min-agreement {min_agreement:g} is not a share", "give a number from 0 to 1 (0.95: 95% agree)"
        )
    if duration_s is None:
        duration_s = REQUESTS_BOUND_S if requests is not None else DEFAULT_DURATION_S
    return float(duration_s), requests


def _shadow(move, shadow: ShadowStep, duration_s, requests, metrics_url, read_metrics, poll_s):
    """Switch the shadow on, wait, and return what it counted since it started and for how long."""
    model, plan = move.model, shadow.plan
    shadow_on(move, shadow)
    time.sleep(SETTLE_S)

    def read() -> ShadowSummary:
        return shadow_summary(read_metrics(metrics_url), model.name, move.current, shadow.candidate)

    before = read()
    start = time.monotonic()
    target = f"{requests} texts or {duration_s:g}s" if requests else f"{duration_s:g}s"
    move.log(
        f"{model.name}: shadow on: version {move.current} mirrors {plan.fraction:g} of its requests to version "
        f"{move.to_version} ({plan.candidate}); waiting for {target}"
    )
    measured, shown = ShadowSummary(), start
    while True:
        time.sleep(poll_s)
        measured = read().since(before)
        elapsed = time.monotonic() - start
        if requests is not None and measured.compared >= requests:
            break
        if elapsed >= duration_s:
            break
        if time.monotonic() - shown >= 10:
            shown = time.monotonic()
            agreement = "n/a" if measured.agreement is None else f"{measured.agreement:.4f}"
            move.log(f"{model.name}: {elapsed:.0f}s: compared {measured.compared}, agreement {agreement}")
    return measured, time.monotonic() - start


def shadow_on(move: Move, shadow: ShadowStep) -> None:
    """The answering step's config with the plan, written and loaded: the serving version starts mirroring."""
    move.model.write(shadow.with_plan())
    move.admin.load(shadow.step)


def shadow_off(move: Move, shadow: ShadowStep, quiet: bool = False) -> None:
    """The answering step's config without the plan (as it served before the shadow), written and loaded."""
    move.model.write(shadow.config)
    try:
        move.admin.load(shadow.step)
    except Exception as exc:  # quiet: another failure is on its way up; this one is only reported beside it
        if not quiet:
            raise
        move.log(f"{move.model.name}: could not reload {shadow.step} without the shadow: {exc}")


def _sweep(move) -> None:
    """No config of the model keeps a shadow plan on disk, whatever happened (a restarted server reads these)."""
    model = move.model
    for name in (model.name, *model.steps, model.canary):
        path = model.repository / name / "config.pbtxt"
        if not path.is_file():
            continue
        config = parse(path.read_text(encoding="utf-8"))
        if SHADOW_PARAMETER in config.parameters:
            del config.parameters[SHADOW_PARAMETER]
            model.write(config)
            move.log(f"{model.name}: took the shadow plan out of {path}")


def _refusal(report: ShadowReport) -> ShadowRefused | None:
    name, version = report.name, report.candidate
    if report.agreement is None:
        if report.failed:
            return ShadowRefused(
                f"{name}: version {version} failed every one of the {report.failed} texts mirrored to it (skipped "
                f"{report.skipped}), so nothing was compared; version {report.serving_version} keeps serving",
                "read the server log for the candidate's errors, fix the version and try again",
            )
        why = (
            f"the candidate fell behind and all {report.skipped} texts were skipped"
            if report.skipped
            else "no traffic reached the model"
        )
        return ShadowRefused(
            f"{name}: the shadow compared no text in {report.seconds:.0f}s ({why}; failed {report.failed}, skipped "
            f"{report.skipped}); version {report.serving_version} keeps serving",
            "send traffic to the model during the shadow, or lengthen --duration (or raise --fraction)",
        )
    if report.min_agreement is not None and report.agreement < report.min_agreement:
        flips = ", ".join(f"{s} -> {c} ({n})" for s, c, n in report.flips[:3]) or "none counted"
        return ShadowRefused(
            f"{name}: version {version} agrees with version {report.serving_version} on {report.agreement:.2%} of "
            f"{report.agree + report.disagree} texts, {report.min_agreement - report.agreement:.2%} below "
            f"--min-agreement {report.min_agreement:g} (most common flips: {flips}); not promoted, version "
            f"{report.serving_version} keeps serving",
            "look at the flips before promoting; promote anyway with a lower --min-agreement, or without --shadow",
        )
    return None
