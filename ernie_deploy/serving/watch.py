"""What a served model answers, watched from the step that answers (the home of labels.json in every layout:
`Layout.answering`): per text, its answer in the kind's series, its length and how it was read, counted in this
process and pushed to Triton's /metrics once a second (serving/metrics.py); the reference profile its version was
built with (reference.json beside labels.json) set as gauges beside them; and, while a candidate version is
shadowed (core.shadow), a share of the requests mirrored to the candidate from a background thread, after the
serving answers are computed, and the two answers compared. Neither counts the warm-up Triton runs through each
instance as it loads (`warmup_requests`): the series count what clients were answered.

Every kind's part (what its answer is, which series it feeds, when two answers agree) is the kind's
(`WATCH` in kinds/<kind>/serving.py); nothing here reads a task's name.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.io import wire
from ernie_deploy.core.profile import (
    CHARS,
    CUT,
    PROFILE_METRIC,
    READING,
    REFERENCE_METRIC,
    TEXTS_METRIC,
    WHOLE,
    WINDOWS,
    Profile,
    buckets,
    chars_bucket,
)
from ernie_deploy.core.shadow import (
    MIRROR_QUEUE,
    SHADOW_FLIPS_METRIC,
    SHADOW_LATENCY_EDGES,
    SHADOW_LATENCY_METRIC,
    SHADOW_METRIC,
    ShadowPlan,
)
from ernie_deploy.serving.metrics import Counts, metric_key
from ernie_deploy.serving.parameters import IO, LABELS_FILE, SHADOW, WATCHED_MODEL, WATCHED_TASK
from ernie_deploy.serving.step import Step

REFERENCE_FILE = "reference.json"
TEXT_NAMES = ("text", "text_pair")
WARMUP = object()  # what a warm-up request's inputs are seen as: neither counted nor mirrored

DESCRIPTIONS = {
    PROFILE_METRIC: "Texts answered, per profile series and bucket (answers per label, entities per type, top "
    "confidence, length in characters, how the text was read)",
    TEXTS_METRIC: "Texts answered",
    REFERENCE_METRIC: "Each bucket's share of its series in the reference profile the version was built with",
    SHADOW_METRIC: "Texts mirrored to the shadowed candidate version, by outcome",
    SHADOW_FLIPS_METRIC: "Texts mirrored to the candidate, per serving answer and candidate answer",
    f"{SHADOW_LATENCY_METRIC}_bucket": "The candidate's latency per mirrored request, cumulative buckets in seconds",
    f"{SHADOW_LATENCY_METRIC}_sum": "The candidate's latency per mirrored request, summed, in seconds",
    f"{SHADOW_LATENCY_METRIC}_count": "Requests mirrored to the candidate that it answered",
}


@dataclass(frozen=True)
class KindWatch:
    """A kind's part: `read(outputs, labels)` -> one answer per row of a request's outputs (in either wire's format);
    `profile(answer)` -> its (series, bucket) pairs; `key(answer)`: equal keys are agreeing answers; `flip(answer)`:
    its row or column in the label-flip table (None: the kind has no such table)."""

    series: tuple[str, ...]  # the kind's profile series (core.profile), beside chars and reading
    needs: tuple[str, ...]  # the outputs (task names) `read` reads
    read: Callable[[dict, list[str]], list]
    profile: Callable[[object], list[tuple[str, str]]]
    key: Callable[[object], object]
    flip: Callable[[object], str | None] = lambda answer: None


class Watched(Step):
    """`step` (an answering step), counting what it answers; a no-op wrapper where its config names no model."""

    def __init__(self, step: Step, config: dict, version_dir: Path, watch: KindWatch, texts: bool = True):
        # texts: whether the step sees the request's texts (a model step that answers sees token ids only: it counts
        # no lengths and no readings, rather than count them wrong)
        self.step, self.watch, self.texts = step, watch, texts
        self.model = WATCHED_MODEL.read(config)
        self.version = Path(version_dir).name
        self.counts: Counts | None = None
        self.mirror: Mirror | None = None
        if not self.model:
            return
        self.warmup = warmup_requests(config)  # this instance's warm-up requests not yet seen
        labels_file = Path(version_dir) / LABELS_FILE.read(config)
        self.labels = json.loads(labels_file.read_text(encoding="utf-8")) if labels_file.exists() else []
        self.series = (*watch.series, CHARS, READING) if texts else watch.series
        self.counts = Counts(DESCRIPTIONS)
        own = {"model": self.model, "version": self.version}
        self.counts.declare(TEXTS_METRIC, own)
        for series in self.series:
            for bucket in buckets(series, self.labels):
                self.counts.declare(PROFILE_METRIC, {**own, "series": series, "bucket": bucket})
        # Each (series, bucket)'s counter key, made once: a merged batch's counts are then added in one locked pass
        # (31-49 us of watching per one-text request measured with the keys made per request, 15-18 us so).
        self.own = own
        self.keys = {
            (series, bucket): metric_key(PROFILE_METRIC, {**own, "series": series, "bucket": bucket})
            for series in self.series
            for bucket in buckets(series, self.labels)
        }
        self.texts_key = metric_key(TEXTS_METRIC, own)
        reference = Path(version_dir) / REFERENCE_FILE
        if reference.exists():
            shares = json.loads(reference.read_text(encoding="utf-8")).get("shares", {})
            for series, by_bucket in shares.items():
                for bucket, share in by_bucket.items():
                    self.counts.set(REFERENCE_METRIC, {**own, "series": series, "bucket": bucket}, float(share))
        plan = SHADOW.read(config)
        if plan is not None:
            if str(plan.serving_version) == self.version:  # the candidate's own step answers; it does not mirror
                task = watched_task(config)
                names = wire(task, IO.read(config))
                self.mirror = Mirror(plan, self.counts, own, watch, self.labels, names)
        # Pushed before the model reports ready (about 60 metrics calls, under 10 ms of its load): a server that is
        # ready shows every series of its models, at 0, and a scrape right after start sees them.
        self.counts.push()

    # The step protocol, passed through ---------------------------------------------------------------------------
    # Seen before the step checks it: a warm-up request the step refuses is still one of the instance's warm-up.
    def check_request(self, inputs, wanted):
        seen = self._seen(inputs)
        return self.step.check_request(inputs, wanted), seen

    def check(self, inputs):
        seen = self._seen(inputs)
        return self.step.check(inputs), seen

    def run(self, items, requested=None):
        if self.counts is not None and requested is not None:
            requested = set(requested) | set(self.watch.needs)
        results = self.step.run([item for item, _ in items], requested)
        if self.counts is not None:
            self._observe(items, results)
        return results

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.close()
        if self.counts is not None:
            self.counts.close()
        self.step.close()

    # What it sees ---------------------------------------------------------------------------------------------------
    def _seen(self, inputs: dict) -> dict | None:
        if self.counts is None:
            return None
        if self.warmup > 0:
            # An instance's first requests are its warm-up: Triton runs them through this execute before the model
            # is ready, so no client request can come before them (one execute at a time per instance).
            self.warmup -= 1
            return WARMUP
        # The arrays are the request's own (Triton's tensors live until the response is sent); a mirrored request
        # copies what it sends.
        return inputs

    def _observe(self, items: list, results: list) -> None:
        """Count what a merged batch answered, in one pass; offer each request to the mirror during a shadow."""
        profile = Profile()
        for (_, seen), result in zip(items, results):
            if seen is WARMUP or isinstance(result, ErnieDeployError):
                continue
            try:
                answers = observe(profile, self.watch, self.labels, seen if self.texts else None, result)
                if self.mirror is not None:
                    self.mirror.offer(seen, answers)
            except Exception:
                # Watching must never cost a client its answer: a request that cannot be counted is left out (it
                # shows as answered in Triton's series and missing from these).
                continue
        added = {
            self.keys.get(key) or metric_key(PROFILE_METRIC, {**self.own, "series": key[0], "bucket": key[1]}): n
            for key, n in profile.counts.items()
        }
        added[self.texts_key] = profile.texts
        self.counts.add_keys(added)


def observe(profile: Profile, watch: KindWatch, labels: list[str], seen: dict | None, outputs: dict) -> list:
    """Add one request's answers to `profile`: the kind's series, and where `seen` (the request's inputs: its texts,
    and the tokenizer's tensors where the step has them) is given, each text's length and how it was read. Returns
    the answers (the kind's `read`). The served step and the reference profile `build` records both count here."""
    answers = watch.read(outputs, labels)
    profile.texts += len(answers)
    for answer in answers:
        for series, bucket in watch.profile(answer):
            profile.add(series, bucket)
    if seen is None:
        return answers
    texts = [np.asarray(seen[name]).reshape(len(answers), -1) for name in TEXT_NAMES if seen.get(name) is not None]
    for i in range(len(answers) if texts else 0):
        chars = sum(len(_text(t[i][0])) for t in texts)
        profile.add(CHARS, chars_bucket(chars))
    for reading in _readings(seen, outputs, len(answers)):
        profile.add(READING, reading)
    return answers


def _text(item) -> str:
    return item.decode("utf-8", "replace") if isinstance(item, bytes | bytearray) else str(item)


def json_item(item):
    """One BYTES element as JSON: Triton hands bytes, a step's own output may still be str."""
    return json.loads(item if isinstance(item, str) else bytes(item))


def warmup_requests(config: dict) -> int:
    """The requests Triton runs through each instance of the model of `config` (the dict Triton passes to
    `initialize`) as it loads, before the model is ready: each sample of its `model_warmup`, `batch_size` requests
    max(1, count) times (server/discover.py measured it: batch_size 2 and count 3 were 6 requests in 3 executions)."""
    return sum(
        max(1, int(sample.get("batch_size", 1))) * max(1, int(sample.get("count", 0)))
        for sample in config.get("model_warmup", [])
    )


def watched_task(config: dict):
    """The task of the model a step watches (core.tasks.TaskSpec)."""
    return WATCHED_TASK.read(config)


def _readings(seen: dict, outputs: dict, rows: int) -> list[str]:
    """How each text was read: in windows (more than one), cut (the model's `truncated`), or whole."""
    starts = outputs.get("window_starts")
    if starts is None:
        starts = seen.get("window_starts")
    if starts is not None:
        windows = (np.asarray(starts).reshape(rows, -1) >= 0).sum(axis=1)
        return [WINDOWS if n > 1 else WHOLE for n in windows]
    truncated = outputs.get("truncated")
    if truncated is None:
        truncated = seen.get("truncated")
    if truncated is None:
        return [WHOLE] * rows
    return [CUT if cut else WHOLE for cut in np.asarray(truncated).reshape(rows, -1)[:, 0]]


class Mirror:
    """Sends `plan.fraction` of the serving step's requests to the candidate from one background thread, compares
    the answers and counts the outcome. The serving answers are already computed when a request is offered, and the
    client's response never waits for the candidate: a queue of MIRROR_QUEUE requests stands between them, and
    when it is full the request is skipped and counted, so a slow or dead candidate costs the clients nothing."""

    def __init__(self, plan: ShadowPlan, counts: Counts, own: dict, watch: KindWatch, labels: list, names):
        self.plan, self.counts, self.watch, self.labels = plan, counts, watch, labels
        self.own = {**own, "candidate": str(plan.version)}
        # A candidate entry takes the model's wire (its clients' names); the same step at another version, its own.
        self.inputs = names.inputs if plan.sends == "text" else None
        self.outputs = names.outputs if plan.sends == "text" else {n: n for n in watch.needs}
        self.credit = 0.0
        self.queue: queue.Queue = queue.Queue(MIRROR_QUEUE)
        for outcome in ("agree", "disagree", "failed", "skipped"):
            counts.declare(SHADOW_METRIC, {**self.own, "outcome": outcome})
        for edge in (*SHADOW_LATENCY_EDGES, float("inf")):
            counts.declare(f"{SHADOW_LATENCY_METRIC}_bucket", {**self.own, "le": _le(edge)})
        counts.declare(f"{SHADOW_LATENCY_METRIC}_sum", self.own)
        counts.declare(f"{SHADOW_LATENCY_METRIC}_count", self.own)
        self.thread = threading.Thread(target=self._loop, daemon=True, name="shadow")
        self.thread.start()

    def offer(self, seen: dict, answers: list) -> None:
        # Every 1/fraction-th request, evenly: a fraction of 1 mirrors all, and a test knows which texts went.
        self.credit += self.plan.fraction
        if self.credit < 1.0:
            return
        self.credit -= 1.0
        if self.plan.sends == "text":
            tensors = {self.inputs[n]: np.array(seen[n], copy=True) for n in TEXT_NAMES if seen.get(n) is not None}
        else:
            tensors = {n: np.array(a, copy=True) for n, a in seen.items() if isinstance(a, np.ndarray)}
        try:
            self.queue.put_nowait((tensors, answers))
        except queue.Full:
            self.counts.add(SHADOW_METRIC, {**self.own, "outcome": "skipped"}, len(answers))

    def close(self) -> None:
        try:
            self.queue.put_nowait(None)
        except queue.Full:
            pass
        self.thread.join(timeout=self.plan.timeout_s + 1)

    def _loop(self) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            tensors, answers = job
            try:
                self._compare(tensors, answers)
            except Exception:  # whatever the candidate did, it is counted, never raised into serving
                self.counts.add(SHADOW_METRIC, {**self.own, "outcome": "failed"}, len(answers))

    def _compare(self, tensors: dict, answers: list) -> None:
        import triton_python_backend_utils as pb

        request = pb.InferenceRequest(
            model_name=self.plan.candidate,
            model_version=self.plan.version if self.plan.sends == "step" else -1,
            inputs=[pb.Tensor(name, array) for name, array in tensors.items()],
            requested_output_names=list(self.outputs.values()),
            timeout=int(self.plan.timeout_s * 1e6),
        )
        start = time.perf_counter()
        response = request.exec()
        seconds = time.perf_counter() - start
        if response.has_error():
            self.counts.add(SHADOW_METRIC, {**self.own, "outcome": "failed"}, len(answers))
            return
        outputs = {}
        for name, wired in self.outputs.items():
            tensor = pb.get_output_tensor_by_name(response, wired)
            if tensor is not None:
                outputs[name] = tensor.as_numpy()
        theirs = self.watch.read(outputs, self.labels)
        self.record(answers, theirs, seconds)

    def record(self, answers: list, theirs: list, seconds: float) -> None:
        if len(theirs) != len(answers):
            self.counts.add(SHADOW_METRIC, {**self.own, "outcome": "failed"}, len(answers))
            return
        outcomes = {"agree": 0.0, "disagree": 0.0}
        flips: dict[tuple[str, str], float] = {}
        for ours, candidate in zip(answers, theirs):
            outcomes["agree" if self.watch.key(ours) == self.watch.key(candidate) else "disagree"] += 1
            row, column = self.watch.flip(ours), self.watch.flip(candidate)
            if row is not None and column is not None:
                flips[(row, column)] = flips.get((row, column), 0.0) + 1
        self.counts.add_many(SHADOW_METRIC, self.own, {(k,): v for k, v in outcomes.items() if v}, ("outcome",))
        if flips:
            self.counts.add_many(SHADOW_FLIPS_METRIC, self.own, flips, ("serving_label", "candidate_label"))
        family = SHADOW_LATENCY_METRIC
        for edge in (*SHADOW_LATENCY_EDGES, float("inf")):
            if seconds <= edge:
                self.counts.add(f"{family}_bucket", {**self.own, "le": _le(edge)})
        self.counts.add(f"{family}_sum", self.own, seconds)
        self.counts.add(f"{family}_count", self.own)


def _le(edge: float) -> str:
    return "+Inf" if edge == float("inf") else f"{edge:g}"


def watched(step_class, watch: KindWatch):
    """A factory of `step_class` (config, version_dir) whose answers are watched with its kind's `watch`."""

    def make(config: dict, version_dir) -> Step:
        return Watched(step_class(config, version_dir), config, Path(version_dir), watch)

    make.__name__ = getattr(step_class, "__name__", "step")
    return make
