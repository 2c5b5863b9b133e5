"""`bash scripts/bench.sh scores-cost`: what a classifier that answers every label's probability and its logits on
request (core.tasks.ON_REQUEST) costs the clients that do not ask, measured in one run on one machine.

The classifier is built twice per layout from the same ONNX model and static files: by this checkout ("after"), and
by the source tree of a git revision from before those answers existed ("before", `--before`, extracted with `git
archive`; its `build` runs from that tree, and its server's python steps import that tree's package). The two
servers run side by side, each idle while the other is loaded. In rounds, each cell (concurrency 1: latency;
concurrency 8: throughput; one text a request, the closed loop of bench.load) is driven for
- before: the earlier build, with the request the project's clients send;
- after: this build, the same request (no probabilities named);
- after, asked: this build, the request of `--all-scores` (probabilities and logits named);
in an order that turns every round, so that each variant takes each place; each cell keeps its best round (the least
disturbed by other work on a shared host). The ratios after/before, from the best rounds and as the median of the
ratios paired within each round, are the cost of the change to a client that does not ask, beside the spread of
before's own rounds; after, asked says what asking costs.
"""

from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path

from benchmarks.rounds import best as best_rounds
from benchmarks.rounds import cell_row
from ernie_deploy.bench.load import prepare_requests, run_load
from ernie_deploy.bench.machine import run_record
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.paths import artifacts_dir
from ernie_deploy.core.tasks import ON_REQUEST
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.server.process import TritonServer

BEFORE = "3fb90b6^"  # the last revision whose classifiers answered only their label and its probability
LAYOUTS = ("fused", "ensemble")
CONCURRENCY = (1, 8)
ROUNDS = 3
# variant -> (which build serves it, the answers computed on request the client names)
VARIANTS = {"before": ("before", ()), "after": ("after", ()), "after, asked": ("after", tuple(sorted(ON_REQUEST)))}
ROOT = Path(__file__).resolve().parent.parent


def source_tree(revision: str, out: Path) -> Path:
    """This repository's files at `revision` (git archive), in `out`."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", revision], capture_output=True, check=True, timeout=120
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BadOptionsError(
            f"cannot read revision {revision!r} of {ROOT}: {getattr(exc, 'stderr', b'').decode(errors='replace')}",
            "run it in a git checkout that holds that revision, or pass another --before",
        ) from None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return out


def build_repository(tree: Path, item: ModelInputs, repo: Path) -> None:
    """Each layout's model into `repo`, by the `build` of the package in `tree`."""
    for layout in LAYOUTS:
        command = [
            sys.executable, "-m", "ernie_deploy.cli", "build", "--model", f"scores_{layout}", "--static",
            str(Path(item.static.root).resolve()), "--onnx", str(Path(item.onnx).resolve()), "--runtime", "python",
            "--layout", layout, "--repository", str(repo.resolve()),
        ]  # fmt: skip
        # `python -m` puts the working folder first on sys.path: the tree's own, so that its package is imported.
        done = subprocess.run(command, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise BadRepositoryError(f"build in {tree} failed: {done.stderr[-2000:]}", "read the error above")


def _env(tree: Path) -> dict[str, str]:
    """PYTHONPATH comes before the editable install's finder; the artifacts are this checkout's, so that each build
    reads the same data (the dev split its reference profile is recorded on)."""

    return {**os.environ, "PYTHONPATH": str(tree), "ERNIE_DEPLOY_ARTIFACTS": str(artifacts_dir().resolve())}


@contextmanager
def _serving(tree: Path, repo: Path, log: Path):
    """A tritonserver over `repo` whose python steps import the package in `tree`: the server is started from
    that folder with it first on PYTHONPATH, and passes both to the steps' stubs."""

    saved, here = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = str(tree)
    os.chdir(tree)
    try:
        server = TritonServer(repo.resolve(), http_port=0, grpc_port=0, metrics_port=0, log_file=log.resolve()).start()
    finally:
        os.chdir(here)
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        yield server
    finally:
        server.stop()


def _check_outputs(servers: dict) -> None:
    """Each build answers what its code says: before without the answers computed on request, after with them."""
    import tritonclient.grpc as grpcclient

    for name, server in servers.items():
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            for layout in LAYOUTS:
                outputs = {o.name for o in client.get_model_metadata(f"scores_{layout}").outputs}
                if (name == "after") != (ON_REQUEST <= outputs):
                    raise BadOptionsError(
                        f"the {name} build of {layout} answers {sorted(outputs)}",
                        "pass a --before revision from before classifiers answered every label's probability",
                    )


def in_process(item: ModelInputs, workdir: Path, trees: dict, repos: dict, *, turns: int = 5, passes: int = 3) -> dict:
    """Each build's fused step timed in its own tree's python (benchmarks/scores_in_process.py), the trees in turn;
    the request names what the project's clients name. Microseconds per text, each its best turn."""
    import json

    texts = workdir / "texts.json"
    texts.write_text(json.dumps(list(item.texts[:400]), ensure_ascii=False), encoding="utf-8")
    named = json.dumps([t.name for t in item.model.wire.read_specs()])
    script = Path(__file__).with_name("scores_in_process.py")
    out: dict = {}
    for _ in range(turns):
        for name, tree in trees.items():
            command = [sys.executable, str(script), str(repos[name] / "scores_fused"), str(texts), named, str(passes)]
            done = subprocess.run(command, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise BadRepositoryError(
                    f"timing the {name} step failed: {done.stderr[-2000:]}", "read the error above"
                )
            for key, us in json.loads(done.stdout.strip().splitlines()[-1]).items():
                out.setdefault(name, {})[key] = min(out.get(name, {}).get(key, float("inf")), us)
    print(f"in process, us per text: {out}", flush=True)
    return out


def measure(item: ModelInputs, workdir: Path, before: str, *, rounds: int, duration_s: float, warmup_s: float):
    trees = {"before": source_tree(before, workdir / "before"), "after": ROOT}
    repos = {name: workdir / f"models_{name}" for name in trees}
    for name, tree in trees.items():
        build_repository(tree, item, repos[name])
    # Both watch alike: a reference profile compared with the live answers is work the other build would not do.
    references = {(repos[n] / "scores_fused" / "1" / "reference.json").is_file() for n in repos}
    if len(references) != 1:
        raise BadRepositoryError("one build recorded a reference profile and the other did not", "read their logs")
    requests = prepare_requests(item.task, item.texts, 1)
    rows: list[dict] = []
    with ExitStack() as stack:
        servers = {n: stack.enter_context(_serving(t, repos[n], workdir / f"{n}.log")) for n, t in trees.items()}
        _check_outputs(servers)
        for round_ in range(rounds):
            # Each variant takes each place in the order in turn: the cell after a switch of servers measured low.
            names = list(VARIANTS)
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for layout in LAYOUTS:
                model = replace(item.model, name=f"scores_{layout}")
                for concurrency in CONCURRENCY:
                    for variant in order:
                        build, asked = VARIANTS[variant]
                        server = servers[build]
                        got = run_load(
                            server.grpc_url,
                            model,
                            requests,
                            concurrency,
                            warmup_s=warmup_s,
                            duration_s=duration_s,
                            server_pgid=server.pid,
                            asked=asked,
                        )
                        rows.append(
                            cell_row(
                                layout,
                                variant,
                                concurrency,
                                got,
                                round_,
                                "before.log and after.log in the run's folder",
                            )
                        )
                        _print(rows[-1])
    return rows, in_process(item, workdir, trees, repos)


def _print(r: dict) -> None:
    print(
        f"round {r['round']} {r['layout']:<8} {r['variant']:<12} c{r['concurrency']}: {r['texts_per_s']:8.1f} texts/s, "
        f"p50 {r['p50_ms']:6.3f} ms, p99 {r['p99_ms']:6.2f} ms, load average {r['load_average']}",
        flush=True,
    )


def best(rows: list[dict]) -> dict:
    """(variant, layout, concurrency) -> its best round (highest throughput)."""
    return {(r["variant"], r["layout"], r["concurrency"]): r for r in best_rounds(rows)}


def _paired(rows: list[dict], variant: str, layout: str, concurrency: int, key: str, pair) -> float:
    """The median over rounds of pair(variant's value, before's value), both from the same round."""
    here = (layout, concurrency)
    cell = {(r["variant"], r["round"]): r[key] for r in rows if (r["layout"], r["concurrency"]) == here}
    return statistics.median(pair(cell[(variant, n)], cell[("before", n)]) for v, n in cell if v == variant)


def ratios(rows: list[dict]) -> list[dict]:
    """Per layout: c1 p50 added and c8 throughput of after (and after, asked) against before, from the best rounds
    and paired within rounds, beside the spread of before's own rounds (what noise is on this host in this run)."""
    top = best(rows)
    out = []
    for layout in LAYOUTS:
        base1, base8 = top[("before", layout, 1)], top[("before", layout, 8)]
        cell = ("before", layout, 8)
        own8 = [r["texts_per_s"] for r in rows if (r["variant"], r["layout"], r["concurrency"]) == cell]
        for variant in ("after", "after, asked"):
            out.append(
                {
                    "layout": layout,
                    "variant": variant,
                    "c1_p50_added_ms": top[(variant, layout, 1)]["p50_ms"] - base1["p50_ms"],
                    "c8_throughput_ratio": top[(variant, layout, 8)]["texts_per_s"] / base8["texts_per_s"],
                    "c1_p50_added_ms_paired": _paired(rows, variant, layout, 1, "p50_ms", lambda a, b: a - b),
                    "c8_throughput_ratio_paired": _paired(rows, variant, layout, 8, "texts_per_s", lambda a, b: a / b),
                    # before's c8 rounds: the lowest over the highest (1.0: no spread)
                    "before_c8_round_spread": min(own8) / max(own8),
                }
            )
    return out


def render(rows: list[dict], ratio: list[dict]) -> str:
    lines = ["| layout | variant | c1 p50 ms | c8 texts/s |", "|---|---|---:|---:|"]
    top = best(rows)
    for layout in LAYOUTS:
        for variant in VARIANTS:
            lines.append(
                f"| {layout} | {variant} | {top[(variant, layout, 1)]['p50_ms']:.3f} | "
                f"{top[(variant, layout, 8)]['texts_per_s']:.1f} |"
            )
    lines.append("")
    for r in ratio:
        lines.append(
            f"{r['layout']}, {r['variant']} against before: c1 p50 {r['c1_p50_added_ms']:+.3f} ms (paired "
            f"{r['c1_p50_added_ms_paired']:+.3f}), c8 throughput x{r['c8_throughput_ratio']:.3f} (paired "
            f"x{r['c8_throughput_ratio_paired']:.3f}; before's own c8 rounds: lowest/highest "
            f"{r['before_c8_round_spread']:.3f})"
        )
    return "\n".join(lines)


def run_scores_cost(
    inputs: list[ModelInputs],
    out: Path,
    *,
    before: str = BEFORE,
    rounds: int = ROUNDS,
    duration_s: float = 10.0,
    warmup_s: float = 1.0,
) -> dict:
    """`bash scripts/bench.sh scores-cost`: the rows, printed, and written to `out`/scores-cost.json."""
    item = next((i for i in inputs if i.task.name == "seq_cls"), None)
    if item is None:
        raise BadOptionsError("the scores-cost bench measures the classifier", "run it with --task seq_cls")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-scores-") as work:
        rows, step_us = measure(item, Path(work), before, rounds=rounds, duration_s=duration_s, warmup_s=warmup_s)
    ratio = ratios(rows)
    record = {
        **run_record(rows),
        "model": item.model.artifact_name,
        "before": before,
        "best": list(best(rows).values()),
        "ratios": ratio,
        "fused_step_us_per_text": step_us,
        "fused_step_added_us_per_text": {key: us - step_us["before"][key] for key, us in step_us["after"].items()},
        "seconds": time.perf_counter() - t0,
    }
    write_json(record, out / "scores-cost.json")
    print(render(rows, ratio))
    print(f"fused step in process, after against before, us per text: {record['fused_step_added_us_per_text']}")
    return record
