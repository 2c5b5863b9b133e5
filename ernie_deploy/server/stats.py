"""Where a running server's time goes: for each served model, every step's queue and compute time per request,
read from Triton's statistics API (open without the admin key, like health and metrics). Which models are served
and which steps each runs is the server's to say (server.discover).

Triton counts per model and version since it loaded: successful requests with their end-to-end time, time queued,
and compute time split into input, infer and output; executions and the texts (inferences) they ran. A step's
counters cover everything it served, so a tokenizer shared by several models is shown under each of them with its
total, and its row names every served model whose traffic that total holds. Two snapshots taken `interval` seconds
apart give what happened in between; one alone, everything since load, warm-up included: every model but an
ensemble runs its `model_warmup` as it loads, and Triton counts those requests like any other (20-200 ms each on
the tiny classifier, where a warm request through its whole ensemble took 3.3 ms: one real request read 1 request
at 3.3 ms end to end over steps of 2 requests at 38-108 ms each). Since load the rows say how many of their
requests were warm-up (server.discover counts them from the configs); an interval leaves them out.

Measured on the tiny classifier, 5 sequential requests: the ensemble's end-to-end time per request was the sum of
its steps' (11.8 ms against 12.3 ms; steps overlap slightly, as a step's response is forwarded before its output
accounting ends). A python step's compute input and output times are its shared-memory hops, so the cost of moving
tensors between processes shows up inside each step's row, not between them.

Failed requests, refused ones included (a bounded queue's UNAVAILABLE), as Triton 2.51 counts them (measured by
overloading the tiny and the demo classifier; its Prometheus counter nv_inference_request_failure counts alike):
- an ensemble counts each failed request twice (1,590 refused requests read 3,180; 1,047 read 2,094; one empty
  text reads 2), so served_times halves an ensemble's count;
- a request refused because a step's queue was full (`build --max-queue-size`) counts at the ensemble only, not at
  the step; one that timed out in a step's queue (`--queue-timeout-us`) counts at that step too (Prometheus reason
  REJECTED there, OTHER at the ensemble);
- a model that is not an ensemble (the fused layout) does not count a full-queue refusal at all (1,584 refused,
  fail count 0): only its clients see those.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace

from ernie_deploy.core.errors import ServerNotReadyError
from ernie_deploy.core.tls import Tls
from ernie_deploy.server.probe import ProbeFailed, http_json

NS_PER_MS = 1e6
ENSEMBLE_FAIL_COUNTS = 2  # times Triton 2.51 counts one failed request of an ensemble (see above)


@dataclass(frozen=True)
class ModelTimes:
    """One model's counters, summed over its loaded versions."""

    requests: int = 0  # successful requests
    failed: int = 0
    executions: int = 0  # runs of the model (a dynamic batch is one)
    texts: int = 0  # inferences: items over all requests
    total_ns: int = 0  # end to end, successful requests
    queue_ns: int = 0
    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0
    # Triton's response cache (`build --cache`): requests answered from it, and those looked up and not found. A hit
    # counts as a successful request whose steps never ran, so the steps' rows show the misses alone.
    cache_hits: int = 0
    cache_misses: int = 0

    def __add__(self, other: ModelTimes) -> ModelTimes:
        return ModelTimes(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __sub__(self, other: ModelTimes) -> ModelTimes:
        return ModelTimes(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    def per_request_ms(self, ns: int) -> float:
        return ns / self.requests / NS_PER_MS if self.requests else 0.0

    @property
    def compute_ns(self) -> int:
        return self.input_ns + self.infer_ns + self.output_ns


def _times(entry: dict) -> ModelTimes:
    stats = entry.get("inference_stats", {})

    def ns(key: str) -> int:
        return int(stats.get(key, {}).get("ns", 0))

    return ModelTimes(
        requests=int(stats.get("success", {}).get("count", 0)),
        failed=int(stats.get("fail", {}).get("count", 0)),
        executions=int(entry.get("execution_count", 0)),
        texts=int(entry.get("inference_count", 0)),
        total_ns=ns("success"),
        queue_ns=ns("queue"),
        input_ns=ns("compute_input"),
        infer_ns=ns("compute_infer"),
        output_ns=ns("compute_output"),
        cache_hits=int(stats.get("cache_hit", {}).get("count", 0)),
        cache_misses=int(stats.get("cache_miss", {}).get("count", 0)),
    )


def loaded_stats(url: str, timeout: float = 5.0, tls: Tls | None = None) -> list[dict]:
    """Each loaded model version's entry of `GET <url>/v2/models/stats` (over https://: `tls`)."""
    try:
        return http_json(f"{url}/v2/models/stats", timeout, tls=tls).get("model_stats", [])
    except ProbeFailed as exc:
        raise ServerNotReadyError(
            f"cannot read statistics from {url}: {exc.problem}",
            "check that the server is up and the URL is its HTTP port",
        ) from None


def snapshot(url: str, timeout: float = 5.0, tls: Tls | None = None) -> dict[str, ModelTimes]:
    """Every loaded model's counters, by name (summed over its versions)."""
    out: dict[str, ModelTimes] = {}
    for entry in loaded_stats(url, timeout, tls):
        out[entry["name"]] = out.get(entry["name"], ModelTimes()) + _times(entry)
    return out


def steps_between(before: dict[str, ModelTimes], after: dict[str, ModelTimes], ensemble: str) -> dict[str, dict]:
    """Every model that answered requests between two snapshots except `ensemble` (whose queue and compute are its
    steps' summed): mean queue and compute ms per request, and texts per execution (what the dynamic batcher
    merged); plain numbers, for a results file. A served model that no other model answered for (a fused one) is
    its own one step."""
    found = {}
    for name, now in sorted(after.items()):
        w = now - before.get(name, ModelTimes())
        if name == ensemble or w.requests <= 0:
            continue
        found[name] = _step_numbers(w)
    if not found and ensemble in after:
        w = after[ensemble] - before.get(ensemble, ModelTimes())
        if w.requests > 0:
            found[ensemble] = _step_numbers(w)
    return found


def _step_numbers(w: ModelTimes) -> dict:
    return {
        "queue_ms": round(w.per_request_ms(w.queue_ns), 4),
        "compute_ms": round(w.per_request_ms(w.compute_ns), 4),
        "texts_per_execution": round(w.texts / w.executions, 2) if w.executions else None,
    }


def failed_requests(times: ModelTimes, ensemble: bool) -> int:
    """The requests that failed (refused ones included) from a model's fail count: an ensemble's counts each one
    twice."""
    return times.failed // ENSEMBLE_FAIL_COUNTS if ensemble else times.failed


@dataclass(frozen=True)
class ServedTimes:
    """One served model over a window: its own counters and each step's."""

    model: str
    times: ModelTimes
    steps: list[tuple[str, ModelTimes]] | None  # None: not known (an ensemble whose config was not read)
    since_load: bool = False  # the window is everything since load: warm-up included
    # Since load, the warm-up requests among the counts of the model and of each of its steps (None: not known).
    warmups: dict[str, int | None] = field(default_factory=dict)
    # Each step that other served models run too -> every served model whose traffic its counts hold.
    shared: dict[str, list[str]] = field(default_factory=dict)
    served: bool = True  # False: a loaded model that no served model is known to run, shown on its own


def served_times(
    steps: dict[str, list[str] | None],
    after: dict[str, ModelTimes],
    before: dict[str, ModelTimes] | None = None,
    *,
    models: list[str] | None = None,
    warmups: dict[str, int] | None = None,
    others: Iterable[str] = (),
) -> list[ServedTimes]:
    """Per served model loaded on the server (`steps`: every one, each with its steps or None where they are not
    known; `models`: only these), its counters and its steps' between two snapshots (or since load); a served
    model's `failed` is its failed requests (an ensemble's fail count halved: failed_requests). A step run by
    several served models is marked with all of them. Since load, `warmups` (per loaded model, the warm-up
    requests among its counts; None: not known) is kept beside the counts. `others`: loaded models shown each on
    its own, after the served ones."""
    since_load = before is None
    before = before or {}

    def window(name: str) -> ModelTimes:
        return after.get(name, ModelTimes()) - before.get(name, ModelTimes())

    def is_ensemble(model: str, members: list[str] | None) -> bool:
        return members is None or members != [model]

    def warm(name: str) -> int | None:
        if not since_load:
            return 0
        return None if warmups is None else warmups.get(name)

    users: dict[str, list[str]] = {}
    for model, members in sorted(steps.items()):
        if model in after:
            for step in dict.fromkeys(members or ()):
                users.setdefault(step, []).append(model)
    rows = []
    for model, members in sorted(steps.items()):
        if model not in after or (models and model not in models):
            continue
        ensemble = is_ensemble(model, members)
        times = window(model)
        rows.append(
            ServedTimes(
                model,
                replace(times, failed=failed_requests(times, ensemble)),
                None if members is None else [(step, window(step)) for step in members],
                since_load,
                # An ensemble runs no warm-up of its own (Triton has none for it): its steps do.
                {model: 0 if ensemble else warm(model), **{step: warm(step) for step in members or ()}},
                {step: users[step] for step in members or () if len(users.get(step, ())) > 1},
            )
        )
    for name in others:
        if name in after:
            rows.append(
                ServedTimes(name, window(name), [(name, window(name))], since_load, {name: warm(name)}, served=False)
            )
    return rows


def format_table(rows: list[ServedTimes]) -> str:
    """The rows as a table: per served model its line and one row per step; a shared step says whose traffic its
    counts hold; since load, a warm-up column and a note say that counts and times include warm-up."""
    if not rows:
        return "no served model is loaded"
    since_load = any(r.since_load for r in rows)
    warm_head = f" {'warm-up':>8}" if since_load else ""
    head = (
        f"  {'step':<32} {'requests':>9}{warm_head} {'failed':>7} {'texts/run':>9} {'queue ms':>9} {'compute ms':>10}  "
        "in / infer / out ms"
    )
    lines = []
    for served in (r for r in rows if r.served):
        t = served.times
        lines.append(
            f"{served.model}: {_counted(t.requests, 'request')} "
            f"({_warmup_count(served, served.model)}{t.failed} failed), "
            f"{t.per_request_ms(t.total_ns):.2f} ms each end to end{_cache_line(t)}"
        )
        if served.steps is None:
            lines.append("  steps: not known (see below)")
        else:
            lines.append(head)
            lines += [_step_line(served, name, s, since_load) for name, s in served.steps]
        lines.append("")
    others = [r for r in rows if not r.served]
    if others:
        lines += ["other loaded models, each on its own:", head]
        lines += [_step_line(r, r.model, r.times, since_load) for r in others]
        lines.append("")
    if since_load:
        lines.append(_warmup_note(rows))
    return "\n".join(lines).rstrip()


def _warmup_count(served: ServedTimes, name: str) -> str:
    warm = served.warmups.get(name, 0)
    if warm is None:
        return "warm-up included, "
    return f"{warm} of them warm-up, " if warm else ""


def _step_line(served: ServedTimes, name: str, s: ModelTimes, since_load: bool) -> str:
    per_run = s.texts / s.executions if s.executions else 0.0
    warm = served.warmups.get(name)
    warm_column = f" {'?' if warm is None else warm:>8}" if since_load else ""
    line = (
        f"  {name:<32} {s.requests:>9}{warm_column} {s.failed:>7} {per_run:>9.1f} {s.per_request_ms(s.queue_ns):>9.2f} "
        f"{s.per_request_ms(s.compute_ns):>10.2f}  {s.per_request_ms(s.input_ns):.2f} / "
        f"{s.per_request_ms(s.infer_ns):.2f} / {s.per_request_ms(s.output_ns):.2f}"
    )
    shared = served.shared.get(name)
    if shared:
        whose = "both" if len(shared) == 2 else f"all {len(shared)}"
        line += f"  shared by {', '.join(shared)}: totals for {whose}"
    return line


def _warmup_note(rows: list[ServedTimes]) -> str:
    note = (
        "since load: the requests, texts and times of each step (and of a model that is not an ensemble) include "
        "its warm-up requests (column warm-up), run as it loaded and far slower than traffic; "
        "`--interval SECONDS` shows traffic alone"
    )
    if any(w is None for r in rows for w in r.warmups.values()):
        note += "; warm-up ?: not known without the server's model configs, which its admin key reads"
    return note


def _cache_line(t: ModelTimes) -> str:
    looked_up = t.cache_hits + t.cache_misses
    if not looked_up:
        return ""
    hits, misses = _counted(t.cache_hits, "hit"), _counted(t.cache_misses, "miss", "misses")
    return f"; cache: {hits}, {misses} ({t.cache_hits / looked_up:.0%} hit)"


def _counted(n: int, one: str, many: str = "") -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def to_dict(rows: list[ServedTimes]) -> dict:
    """The rows as plain numbers: per model its counters, `served` (False: a loaded model shown on its own),
    `since_load`, `warmup_requests` (among its counts; since load only, null where not known) and its steps (null
    where not known), each step with its counters, `warmup_requests` and `shared_by` (every served model whose
    traffic its counts hold, where more than one)."""

    def times(t: ModelTimes) -> dict:
        return {f.name: getattr(t, f.name) for f in fields(t)}

    def warm(r: ServedTimes, name: str) -> int | None:
        return r.warmups.get(name) if r.since_load else 0

    return {
        r.model: {
            **times(r.times),
            "served": r.served,
            "since_load": r.since_load,
            "warmup_requests": warm(r, r.model),
            "steps": None
            if r.steps is None
            else {
                name: {**times(t), "warmup_requests": warm(r, name), "shared_by": r.shared.get(name, [])}
                for name, t in r.steps
            },
        }
        for r in rows
    }
