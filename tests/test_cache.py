"""Triton's response cache (`build --cache`, `serve --cache-size`): where each layout enables it, the server's side,
answers equal to uncached ones, rollouts that never answer from an old version's cache, and the counters."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest

from ernie_deploy.core.errors import BadRequest, ErnieDeployError
from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS
from ernie_deploy.repository.build import BuildOptions, ModelArtifacts, build
from ernie_deploy.repository.configs import parse
from ernie_deploy.repository.layouts import LAYOUTS, task_configs
from ernie_deploy.repository.resolve import resolve_options
from ernie_deploy.server.cache import DEFAULT_CACHE_BYTES, check_cache
from ernie_deploy.server.process import TritonServer
from tests.conftest import NEWS_TEXTS, artifacts

TEXTS = NEWS_TEXTS


def _entry(pipeline, name: str) -> ModelArtifacts:
    return artifacts(pipeline, name)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_cache_is_on_the_entry_alone_and_off_by_default(tiny_pipeline, layout):
    p = tiny_pipeline
    spec = p.static.spec

    def configs(**options):
        return task_configs(resolve_options(spec, BuildOptions(runtime="python", layout=layout, **options)), p.onnx)

    plain = configs()
    assert not any(c.HasField("response_cache") for c in plain)
    if layout == "fused":
        with pytest.raises(ErnieDeployError, match="cache a refused request as an empty answer"):
            configs(response_cache=True)
        return
    cached = configs(response_cache=True)
    assert [c.name for c in cached if c.response_cache.enable] == [DEMO_MODELS[SEQ_CLS.name]]
    # Nothing else differs.
    for a, b in zip(plain, cached):
        b.ClearField("response_cache")
        assert a == b


def test_a_caching_ensemble_is_the_version_it_serves(tiny_pipeline, tiny_pipeline_v2, tmp_path):
    from ernie_deploy.repository.add_version import build_version
    from ernie_deploy.repository.versions import VersionedModel

    repo = tmp_path / "models"
    cached = BuildOptions(runtime="python", layout="ensemble", response_cache=True)
    build(_entry(tiny_pipeline, "news"), repo, cached)
    with pytest.raises(ErnieDeployError, match="whether answers are cached is the model's"):
        build_version(
            _entry(tiny_pipeline_v2, "news"), repo, BuildOptions(runtime="python", layout="ensemble"), version=2
        )
    build_version(_entry(tiny_pipeline_v2, "news"), repo, cached, version=2)
    model = VersionedModel.read(repo, "news")
    assert list(model.entry.version_policy.specific.versions) == [1]
    model.write(model.pinned(2))
    entry = parse((repo / "news" / "config.pbtxt").read_text())
    assert list(entry.version_policy.specific.versions) == [2] and (repo / "news" / "2").is_dir()
    assert {s.model_version for s in entry.ensemble_scheduling.step if s.model_name != "ernie_tokenizer"} == {2}
    # A number used before may have answers cached under it in a running server.
    with pytest.raises(ErnieDeployError, match="a number not used before"):
        build_version(_entry(tiny_pipeline, "news"), repo, cached, version=1)


def test_the_server_side_of_the_cache(tiny_pipeline, tmp_path):
    from ernie_deploy.server.args import server_args
    from ernie_deploy.server.binary import SYSTEM, TritonBinary, find_tritonserver

    assert f"--cache-config=local,size={DEFAULT_CACHE_BYTES}" in server_args("/models")
    assert not any("cache" in a for a in server_args("/models", cache_bytes=0))
    wheel = find_tritonserver()
    server = TritonServer(tmp_path, http_port=1, grpc_port=2, metrics_port=3)
    server.binary = wheel
    assert f"--cache-directory={wheel.wheel_root / 'caches'}" in server.command()
    repo = tmp_path / "models"
    build(_entry(tiny_pipeline, "news"), repo, BuildOptions(runtime="python", layout="ensemble", response_cache=True))
    check_cache(repo, DEFAULT_CACHE_BYTES, wheel)
    with pytest.raises(ErnieDeployError, match=r"news in .* asks for Triton's response cache.*--cache-size 0") as e:
        check_cache(repo, 0, wheel)
    assert "rebuild the model without --cache" in e.value.fix
    bare = TritonBinary(tmp_path / "bin" / "tritonserver", tmp_path / "backends", SYSTEM)
    with pytest.raises(ErnieDeployError, match="no local response cache library"):
        check_cache(tmp_path, DEFAULT_CACHE_BYTES, bare)
    check_cache(tmp_path, 0, bare)


# -- on a real server ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cache_server(tmp_path_factory, tiny_pipeline):
    """The tiny classifier three times: as an ensemble with and without the cache, and with the cache in the
    tokenizer-in-model layout; the batcher waits 2 ms so concurrent requests share batches."""
    repo = tmp_path_factory.mktemp("cache_models")
    for name, layout, cache in (
        ("news", "ensemble", True),
        ("plain", "ensemble", False),
        ("tnews", "tokenizer-in-model", True),
    ):
        options = BuildOptions(runtime="python", layout=layout, response_cache=cache, max_queue_delay_us=2000)
        build(_entry(tiny_pipeline, name), repo, options)
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "cache.log") as server:
        yield server, repo


def _answers(url: str, name: str, rounds: int = 3) -> tuple[list, list]:
    """Four threads at once, each request one text, three of them good and one holding an empty text among good
    ones, `rounds` times over: the good answers in order, and what each bad request got."""
    from ernie_deploy.client.grpc_client import NO_RETRY, Client, decode_outputs

    task = SEQ_CLS
    good: dict[int, list] = {}
    bad: list = []

    def worker(n: int) -> None:
        with Client(task, url, model=name, retry=NO_RETRY) as client:
            for _ in range(rounds):
                if n == 3:
                    try:
                        client.infer(["股市大涨", "", "中国"])
                        bad.append("answered")
                    except BadRequest as exc:
                        bad.append(str(exc))
                    continue
                for i in range(n, len(TEXTS), 3):
                    good.setdefault(i, []).append(decode_outputs(task, client.infer([TEXTS[i]]))[0])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [good[i] for i in range(len(TEXTS))], bad


@pytest.mark.integration
def test_cached_answers_equal_uncached_ones_and_a_bad_request_fails_alone(cache_server, tiny_pipeline):
    from ernie_deploy.evaluate.offline import onnx_predictions

    server, _ = cache_server
    p = tiny_pipeline
    offline = onnx_predictions(p.static.spec, p.onnx, p.static.vocab_file, TEXTS)
    without, bad_plain = _answers(server.grpc_url, "plain")
    assert without == [[answer] * 3 for answer in offline]
    for cached in ("news", "tnews"):
        with_cache, bad_cached = _answers(server.grpc_url, cached)
        assert with_cache == without, cached
        # Refused every time, by name, never answered from the cache: an ensemble caches only what its steps answered.
        assert len(bad_cached) == len(bad_plain) == 3
        assert all("refused the request" in b and "empty" in b.lower() for b in bad_cached + bad_plain), bad_cached


@pytest.mark.integration
def test_stats_and_metrics_show_hits_and_misses_per_model(cache_server, tmp_path, capsys):
    from ernie_deploy.cli import main
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.repository.served import served_steps
    from ernie_deploy.server.stats import format_table, served_times, snapshot

    server, repo = cache_server
    before = snapshot(server.http_url)
    for name in ("news", "plain"):
        with Client(SEQ_CLS, server.grpc_url, model=name) as client:
            for _ in range(4):
                client.infer(["体育 新闻 cache"])
    # Triton counts a request in its statistics a moment after the client has the answer: wait for all eight.
    deadline = time.monotonic() + 10
    while True:
        after = snapshot(server.http_url)
        if all((after[m] - before[m]).requests >= 4 for m in ("news", "plain")) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    rows = {r.model: r for r in served_times(served_steps(repo), after, before)}
    news, plain = rows["news"].times, rows["plain"].times
    assert (news.requests, news.cache_hits, news.cache_misses) == (4, 3, 1)
    assert (plain.requests, plain.cache_hits, plain.cache_misses) == (4, 0, 0)
    # Its own steps ran for the miss alone (the tokenizer, shared with `plain`, ran for both models).
    assert {name: step.requests for name, step in rows["news"].steps} == {
        "ernie_tokenizer": 5,
        "news_model": 1,
        "news_postprocess": 1,
    }
    table = format_table([rows["news"], rows["plain"]])
    assert "news: 4 requests (0 failed)" in table and "cache: 3 hits, 1 miss (75% hit)" in table
    assert table.count("cache:") == 1
    assert main(["stats", "--http-url", server.http_url, "--repository", str(repo), "--model", "news"]) == 0
    assert re.search(r"^news: \d+ requests .*; cache: \d+ hits, \d+ misses", capsys.readouterr().out, re.M)
    metrics = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()

    def series(name: str, model: str) -> float:
        found = re.search(rf'^{name}{{model="{model}",version="1"}} (\S+)$', metrics, re.M)
        assert found, f"no {name} for {model} on /metrics"
        return float(found.group(1))

    assert series("nv_cache_num_hits_per_model", "news") >= 3
    assert series("nv_cache_num_misses_per_model", "news") >= 1
    assert series("nv_cache_num_hits_per_model", "tnews") > 0  # from the test before
    assert not re.search(r'^nv_cache_num_hits_per_model{model="plain"', metrics, re.M)
    assert re.search(r"^nv_cache_num_entries \d+", metrics, re.M)


@pytest.mark.integration
def test_a_server_without_a_cache_refuses_a_model_that_asks_for_it(cache_server, tmp_path):
    _, repo = cache_server
    server = TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, cache_bytes=0)
    with pytest.raises(ErnieDeployError, match=r"news, tnews in .* asks for Triton's response cache"):
        server.start(timeout=60)
    assert not server.is_running()


@pytest.mark.integration
def test_rollouts_under_repeated_texts_never_answer_from_an_old_versions_cache(
    tiny_pipeline, tiny_pipeline_v2, tmp_path
):
    """The same eight texts over and over, so nearly every answer comes from the cache, through a rollout and a
    rollback of two caching models (ensemble, tokenizer-in-model): every answer is the serving version's. Before
    the entry's own version followed the served one, the old version's cached answers came back after the switch."""
    from ernie_deploy.client.admin import RepositoryAdmin
    from ernie_deploy.evaluate.offline import onnx_predictions
    from ernie_deploy.reliability.rollout_soak import rollout_soak
    from ernie_deploy.repository.add_version import build_version
    from ernie_deploy.repository.served import served_model
    from ernie_deploy.server.stats import snapshot

    repo = tmp_path / "models"
    for name, layout in (("news", "ensemble"), ("tnews", "tokenizer-in-model")):
        options = BuildOptions(runtime="python", layout=layout, response_cache=True)
        build(_entry(tiny_pipeline, name), repo, options)
        build_version(_entry(tiny_pipeline_v2, name), repo, options, version=2)
    references = {
        v: onnx_predictions(p.static.spec, p.onnx, p.static.vocab_file, TEXTS)
        for v, p in ((1, tiny_pipeline), (2, tiny_pipeline_v2))
    }
    assert sum(a != b for a, b in zip(references[1], references[2])) >= 4, "the versions must differ on the texts"
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:
        with RepositoryAdmin(server.grpc_url) as admin:
            for name in ("news", "tnews"):
                model = served_model(repo, name)
                report = rollout_soak(
                    server.grpc_url, repo, model, (1, 2), references, TEXTS, admin=admin, concurrency=3, settle_s=1.5
                )
                assert report.clean, (name, report.to_dict())
                assert report.by_version["1"] > 0 and report.by_version["2"] > 0, (name, report.to_dict())
                # Counted since the last switch (a reload starts the counters again): the cache was answering.
                hits = snapshot(server.http_url)[name].cache_hits
                assert hits > 100, (name, hits, report.requests)


def test_the_workloads_are_a_zipf_draw_and_unique_texts():
    from benchmarks.cache import workloads

    texts = [f"标题 {i}" for i in range(400)]
    drawn = workloads(texts + texts[:10], 300)
    repeated, unique = drawn["repeated"], drawn["unique"]
    assert len(repeated) == 300 and set(repeated) <= set(texts[:200])
    assert repeated.count(texts[0]) > repeated.count(texts[100]) and len(set(repeated)) < 200
    assert unique[:200] == texts[200:400] and unique[200] == f"{texts[200]} 1" and len(set(unique)) == 300
    assert not set(unique) & set(repeated)
    mixed = drawn["half repeated"]
    assert len(mixed) == 300 and len(set(mixed[0::2])) == 16 and len(set(mixed[1::2])) == 150
    assert not set(mixed) & (set(unique) | set(repeated)), "each workload starts on a cache that has none of its texts"


@pytest.mark.integration
def test_the_cache_bench_smoke_runs(tiny_pipeline, tmp_path, capsys):
    from benchmarks.cache import run_cache
    from ernie_deploy.bench.config import BenchConfig
    from ernie_deploy.evaluate.inputs import ModelInputs

    p = tiny_pipeline
    texts = [f"{a}{b} 新闻" for a in TEXTS for b in TEXTS]
    item = ModelInputs(p.static.spec, p.onnx, p.static, texts)
    record = run_cache([item], BenchConfig.smoke(), tmp_path, n=60, concurrency=2)
    rows = {(r["workload"], r["cache"]): r for r in record["rows"]}
    assert rows[("repeated", "with")]["hit_rate"] > 0.3 and rows[("repeated", "without")]["cache_hits"] == 0
    assert rows[("unique", "with")]["cache_hits"] == 0 and rows[("unique", "with")]["cache_misses"] == 60
    assert set(record["ratios"]) == {"repeated", "unique", "half repeated"} and (tmp_path / "cache.json").exists()
    # every other request is one of 16 hot texts: after each one's first miss, those hit
    half = rows[("half repeated", "with")]
    assert half["cache_hits"] == 30 - 16 and half["cache_misses"] == 60 - 14
    assert "repeated: with the cache / without: throughput x" in capsys.readouterr().out


@pytest.mark.integration
def test_the_answer_series_count_computed_answers_and_triton_counts_the_cached_ones(cache_server):
    """A cached answer never reaches a python step, so the answer series (serving.watch) count each text once, when
    it was computed; the answers given from the cache are Triton's cache hits on the entry. The two together are every
    answer given (docs/OPERATIONS.md says how to read them side by side)."""
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.server.stats import snapshot
    from tests.test_layout_matrix import counted_since, settled_counts

    server, _ = cache_server
    text = "缓存里的一条新闻标题"
    before, stats_before = settled_counts(server.metrics_url, "news"), snapshot(server.http_url)
    with Client(SEQ_CLS, server.grpc_url, model="news") as client:
        for _ in range(5):
            client.infer([text])
    delta = counted_since(server.metrics_url, "news", before, 1)
    assert delta[("texts", "")] == 1
    hits = snapshot(server.http_url)["news"].cache_hits - stats_before["news"].cache_hits
    assert hits == 4
