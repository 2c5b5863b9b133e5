"""`ernie-deploy tune NAME`: the served settings of one model, searched on this machine with its own texts.

Each trial builds the model alone in one candidate layout and settings (BuildOptions), serves it on a real
tritonserver and loads it, with perf_analyzer where it is installed (else the asyncio generator), at one concurrency.
The search is coordinate descent from the default build: one dimension at a time (layout, instances, onnxruntime
threads, spinning, queue delay, max batch), every value of it tried with the others at the best found so far, the best
kept. It visits the sum of the dimensions' sizes, not their product (6 dimensions: 15 trials instead of 324), and a
budget in minutes stops it before a trial that would not fit. The objective is the highest throughput whose p99 stays
under a budget (or the highest throughput, without one), or the lowest p50 of a lone request.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.load import prepare_requests
from ernie_deploy.bench.perf_analyzer import PERF_ANALYZER, perf_analyzer_input
from ernie_deploy.bench.rows import SERVED
from ernie_deploy.bench.server_rows import perf_analyzer_row, python_row
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, FailedRequestsError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.resolve import resolve_options, resolves
from ernie_deploy.server.process import TritonServer

# What the search varies, in the order it varies them: the layout first (the largest effect measured: a lone request
# 0.8-2.7 ms sooner fused than through the ensemble, docs/BENCHMARKS.md), then what divides the cores, then what
# trades latency for batching. Values other than these are passed with --set.
DIMENSIONS: dict[str, tuple] = {
    "layout": ("fused", "ensemble", "graph-postprocess", "tokenizer-in-model"),
    "instances": (1, 2),
    "ort_threads": (0, 1, 2),
    "ort_spinning": ("off", "run", "always"),
    "max_queue_delay_us": (0, 500, 2000),
    "max_batch_size": (8, 64),
}
OBJECTIVES = ("throughput", "latency")
# the concurrency each objective is measured at, unless --concurrency: a lone request, or a loaded server
DEFAULT_CONCURRENCY = {"throughput": 8, "latency": 1}


@dataclass
class Trial:
    options: dict  # the BuildOptions fields this trial sets
    throughput: float = 0.0  # texts per second
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    errors: int = 0
    tool: str = ""
    seconds: float = 0.0  # build, start, warm-up and measurement
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors and self.throughput > 0


@dataclass
class Objective:
    kind: str = "throughput"  # OBJECTIVES
    p99_budget_ms: float | None = None  # throughput: trials whose p99 is above this lose to any that is not

    def __post_init__(self) -> None:
        if self.kind not in OBJECTIVES:
            raise BadOptionsError(f"unknown objective {self.kind!r}", f"use one of {', '.join(OBJECTIVES)}")
        if self.p99_budget_ms is not None and self.kind != "throughput":
            raise BadOptionsError(
                "--p99-ms bounds the throughput objective's tail", "drop --p99-ms, or use --objective throughput"
            )

    def key(self, trial: Trial) -> tuple:
        """Larger is better. A failed trial loses to every trial that answered."""
        if not trial.ok:
            return (0, 0.0)
        if self.kind == "latency":
            return (1, -trial.p50_ms)
        within = self.p99_budget_ms is None or trial.p99_ms <= self.p99_budget_ms
        # Within the budget: the most throughput; past it: the shortest tail.
        return (2, trial.throughput) if within else (1, -trial.p99_ms)

    def describe(self) -> str:
        if self.kind == "latency":
            return "lowest p50"
        return "highest throughput" + (f" with p99 <= {self.p99_budget_ms:g} ms" if self.p99_budget_ms else "")


@dataclass
class TuneResult:
    model: str
    objective: str
    concurrency: int
    trials: list[Trial] = field(default_factory=list)
    best: dict | None = None  # the winning trial's options
    untried: int = 0  # trials the budget left out
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "trials": [asdict(t) for t in self.trials]}


def search_space(inputs: ModelInputs, base: BuildOptions, dimensions: Sequence[str] | None = None) -> dict[str, tuple]:
    """The dimensions searched and their values for this model: only layouts that fit it and run on the python
    model step (the pip server's), and the base's own value of each dimension first."""
    names = list(dimensions or DIMENSIONS)
    unknown = sorted(set(names) - set(DIMENSIONS))
    if unknown:
        raise BadOptionsError(f"unknown tuning dimension {', '.join(unknown)}", f"use some of {', '.join(DIMENSIONS)}")
    space = {}
    for name in names:
        values = list(DIMENSIONS[name])
        if name == "layout":
            values = [v for v in values if _fits(inputs, replace(base, layout=v))]
        current = getattr(base, name)
        space[name] = tuple(dict.fromkeys([current, *values]))
    return space


def _fits(inputs: ModelInputs, options: BuildOptions) -> bool:
    return resolves(inputs.model, options)


def tune(
    inputs: ModelInputs,
    config: BenchConfig,
    objective: Objective,
    base: BuildOptions,
    workdir: Path,
    *,
    concurrency: int | None = None,
    budget_s: float | None = None,
    dimensions: Sequence[str] | None = None,
    measure: Callable[[ModelInputs, BuildOptions, BenchConfig, int, Path], Trial] | None = None,
    progress: bool = True,
) -> TuneResult:
    """Search `base`'s settings for `inputs.model` (coordinate descent, see the module) and return every trial
    and the winner. `budget_s`: no trial starts that the average trial so far says would end past it."""
    from tqdm import tqdm

    measure = measure or measure_trial
    concurrency = concurrency or DEFAULT_CONCURRENCY[objective.kind]
    base = replace(base, layout=resolve_options(inputs.model, base).layout)
    space = search_space(inputs, base, dimensions)
    result = TuneResult(inputs.name, objective.describe(), concurrency)
    total = 1 + sum(len(v) - 1 for v in space.values())
    started = time.monotonic()
    seen: dict[tuple, Trial] = {}
    best_options = {name: getattr(base, name) for name in space}

    def run(options: dict) -> Trial | None:
        key = tuple(sorted(options.items()))
        if key in seen:
            return seen[key]
        done = [t.seconds for t in result.trials]
        if budget_s is not None and done:
            spent = max(time.monotonic() - started, sum(done))
            if spent + sum(done) / len(done) > budget_s:
                return None
        trial = measure(inputs, replace(base, **options), config, concurrency, workdir / f"trial{len(result.trials)}")
        trial.options = dict(options)
        seen[key] = trial
        result.trials.append(trial)
        return trial

    with tqdm(total=total, desc=f"tune {inputs.name}", unit="trial", disable=not progress) as bar:
        best = run(best_options)
        bar.update(1)
        for name, values in space.items():
            for value in values[1:]:
                candidate = {**best_options, name: value}
                if not _fits_options(inputs, base, candidate):
                    bar.update(1)
                    continue
                trial = run(candidate)
                if trial is None:
                    result.untried = total - bar.n
                    break
                bar.update(1)
                _show(bar, trial, result, total)
                if best is None or objective.key(trial) > objective.key(best):
                    best, best_options = trial, dict(candidate)
            if result.untried:
                break
    result.best = best.options if best is not None and best.ok else None
    result.seconds = time.monotonic() - started
    return result


def _fits_options(inputs: ModelInputs, base: BuildOptions, options: dict) -> bool:
    return _fits(inputs, replace(base, **options))


def _show(bar, trial: Trial, result: TuneResult, total: int) -> None:
    """The bar's postfix: the last trial, and when the search should end at the trials' average time so far."""
    average = sum(t.seconds for t in result.trials) / len(result.trials)
    left = max(0, total - bar.n) * average
    bar.set_postfix_str(
        f"{_options_text(trial.options)}: {trial.throughput:.0f}/s p50 {trial.p50_ms:.1f} ms; ~{left / 60:.1f} min left"
    )


def measure_trial(inputs: ModelInputs, options: BuildOptions, config: BenchConfig, concurrency: int, workdir: Path):
    """Build the model alone with `options`, serve it, and load one served cell at `concurrency` the way the
    benchmark's served rows are loaded (bench.server_rows): one Trial."""
    from ernie_deploy.repository.build import build

    t0 = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    repository = workdir / "models"
    build([_artifacts(inputs)], repository, options)
    tool = config.load_generators[0]
    with TritonServer(
        repository, http_port=0, grpc_port=0, metrics_port=0, log_file=workdir / "tritonserver.log"
    ) as server:
        requests = prepare_requests(inputs.task, inputs.texts, 1)
        if tool == PERF_ANALYZER:
            input_file = perf_analyzer_input(inputs.task, inputs.texts, workdir / "input.json")
            row = perf_analyzer_row(server, inputs, config, requests, input_file, SERVED, 1, concurrency, workdir)
        else:
            row = python_row(server, inputs, config, requests, SERVED, 1, concurrency)
    return Trial({}, row.throughput, row.p50_ms, row.p99_ms, row.errors, tool, time.monotonic() - t0, row.note or "")


def _artifacts(inputs: ModelInputs):
    """What a trial builds: the model's record as `inputs` hold it (the served one, for `ernie-deploy tune`) and its
    files."""
    from ernie_deploy.repository.build import ModelArtifacts

    return ModelArtifacts(inputs.model, inputs.onnx, inputs.static.vocab_file)


def _options_text(options: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in options.items())


def render(result: TuneResult, objective: Objective) -> str:
    """Markdown: every trial in the order run, its ratio to the first (the default build), the winner marked."""
    first = result.trials[0] if result.trials else None
    names = list(result.trials[0].options) if result.trials else []
    head = " | ".join(names)
    lines = [
        f"Model {result.model}, concurrency {result.concurrency}, objective: {result.objective}"
        + (f"; {result.untried} trials left out by the budget" if result.untried else ""),
        "",
        f"| {head} | texts/s | × default | p50 ms | p99 ms | errors | |",
        "|" + "---|" * len(names) + "---:|---:|---:|---:|---:|---|",
    ]
    for trial in result.trials:
        ratio = f"{trial.throughput / first.throughput:.2f}" if first and first.throughput else "–"
        mark = "**best**" if trial.options == result.best else ""
        cells = " | ".join(str(trial.options[n]) for n in names)
        lines.append(
            f"| {cells} | {trial.throughput:.1f} | {ratio} | {trial.p50_ms:.2f} | {trial.p99_ms:.2f} | "
            f"{trial.errors} | {mark} |"
        )
    return "\n".join(lines)


def tune_in_tempdir(inputs: ModelInputs, config: BenchConfig, objective: Objective, base: BuildOptions, **kwargs):
    """`tune` with its trial repositories in a temporary folder, removed after."""
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-tune-") as work:
        return tune(inputs, config, objective, base, Path(work), **kwargs)


def served_options(repository: str | Path, name: str) -> tuple[ModelSpec, BuildOptions]:
    """Model `name`'s record as `repository` serves it, and the base a search starts from: its serving settings and
    its layout. Every trial builds from that record (repository.resolve keeps its reading, limits, decoding and wire),
    with the settings the trial replaces. The search runs on the python model step, the one the pip server has: a
    model whose step runs on the ORT backend is refused."""
    from ernie_deploy.repository.served import served_models

    specs = served_models(repository)
    if name not in specs:
        raise BadRepositoryError(
            f"{repository} serves no model {name!r}", f"use one of: {', '.join(sorted(specs)) or 'none'}"
        )
    spec = specs[name]
    if spec.serving.runtime != "python":
        raise BadOptionsError(
            f"{name!r} runs its model step on the {spec.serving.runtime} backend; tune measures on the python model "
            "step, the one the pip tritonserver has",
            "tune it where it is served (Triton Model Analyzer in the NGC container measures the ORT backend), or "
            "build it with --runtime python first",
        )
    return spec, BuildOptions(**spec.serving.to_dict(), layout=spec.layout)


@dataclass(frozen=True)
class Written:
    version: int | None  # the version written, or None where the winner cannot be one (see `advice`)
    advice: str  # what to run next


# A winner less than this much better than the served settings (the first trial) is not written: on a shared host
# the same settings measured twice differ by a few percent (BENCHMARKS: the demo classifier's tune run, whose best
# was 1.02x), so a smaller gain is more likely noise than a better setting.
MIN_GAIN = 0.05


def gain(result: TuneResult, objective: Objective) -> float | None:
    """How much better the winner measured than the first trial (the served settings): throughput over throughput,
    or p50 over p50, minus 1; None where either did not answer."""
    if not result.trials or result.best is None:
        return None
    first = result.trials[0]
    best = next(t for t in result.trials if t.options == result.best)
    if not (first.ok and best.ok):
        return None
    if objective.kind == "latency":
        return first.p50_ms / best.p50_ms - 1
    return best.throughput / first.throughput - 1


def write_winner(
    result: TuneResult,
    inputs: ModelInputs,
    repository: str | Path,
    base: BuildOptions,
    version: int | None = None,
    *,
    objective: Objective | None = None,
    min_gain: float = MIN_GAIN,
) -> Written:
    """The winner as a new version of the served model, beside the serving one (rollout puts it live), unless it
    measured less than `min_gain` better than the served settings. A winner in another layout, or for a model whose
    tokenizer step is shared with other models (whose settings one model's version cannot change), is a rebuild: its
    command is the advice."""
    from ernie_deploy.repository.add_version import build_version
    from ernie_deploy.repository.versions import VersionedModel

    name = result.model
    if result.best is None:
        raise FailedRequestsError(f"no trial of {name!r} answered without errors", "read the trials' notes and logs")
    winner = replace(base, **result.best)
    changed = {k: v for k, v in result.best.items() if getattr(base, k) != v}
    if not changed:
        return Written(None, f"{name} already serves with the best settings measured; nothing to roll out")
    better = gain(result, objective or Objective())
    if better is not None and better < min_gain:
        return Written(
            None,
            f"the best settings measured {better:+.1%} against what {name} serves, under the {min_gain:.0%} a "
            "shared machine's noise can give; nothing written (lower --min-gain to write it anyway)",
        )
    model = VersionedModel.read(repository, name)
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in result.best.items())
    rebuild = f"ernie-deploy build --model {name} --repository {repository} {flags}"
    if winner.layout != model.layout.name:
        return Written(None, f"the winner is another layout ({winner.layout}): a new build, not a version: {rebuild}")
    if model.layout.shares_tokenizer:
        return Written(
            None,
            f"{name} shares its tokenizer step with other models, whose settings a version cannot change: {rebuild}",
        )
    version = version or max(model.on_disk(), default=0) + 1
    build_version(_artifacts(inputs), repository, winner, version=version)
    rollout = f"ernie-deploy rollout --model {name} --to {version} --repository {repository}"
    return Written(version, f"put it live: {rollout}")
