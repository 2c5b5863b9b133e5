"""The Grafana dashboard (`ernie-deploy dashboard`, deploy/grafana/ernie-deploy.json): the committed file is the
generator's output, it is dashboard JSON as Grafana's SDK reads and writes it, every panel has queries and a panel on a
metric Triton does not export is refused; and on a real Prometheus scraping a real server, every panel's query has
series for every served model and version (the cache panels for the models built with the cache, and only those), and
the variables list them.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest

from ernie_deploy.cli import main
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.deployfiles import dashboard as board
from ernie_deploy.deployfiles import dashboard_panels as board_panels
from ernie_deploy.server.args import server_args
from ernie_deploy.server.cache import models_asking_for_cache
from tests.test_cache import cache_server  # noqa: F401  (the cached repository's server, used as a fixture here)
from tests.test_prometheus import _Prometheus, _served_models, _wait_for

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / board.DEFAULT_OUT


def _grafana_panels(data: dict) -> list[dict]:
    return [p for p in data["panels"] if p["type"] != "row"]


def test_the_committed_dashboard_is_the_generators_output():
    assert COMMITTED.read_text(encoding="utf-8") == board.render(), (
        "deploy/grafana/ernie-deploy.json is out of date: run `ernie-deploy dashboard`"
    )


@pytest.mark.filterwarnings("ignore:Prefer using dashboardv2")  # the SDK's, for the classic schema used here
def test_it_is_dashboard_json_as_grafanas_sdk_reads_and_writes_it():
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    data = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert data["uid"] == board.DEFAULT_UID and data["title"] == board.DEFAULT_TITLE
    assert data["schemaVersion"] == Dashboard().schema_version
    # Read into the SDK's model and written back, nothing is lost or added.
    assert json.loads(JSONEncoder(sort_keys=True).encode(Dashboard.from_json(data))) == data
    variables = data["templating"]["list"]
    assert [v["name"] for v in variables] == ["datasource", "job", "instance", "model", "version"]
    assert variables[0]["type"] == "datasource" and variables[0]["query"] == "prometheus"
    for variable in variables[1:]:
        assert variable["type"] == "query" and variable["query"].startswith("label_values(nv_inference_request_success")
        assert variable["multi"] and variable["includeAll"] and variable["allValue"] == ".+"
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids)) and all(p["gridPos"]["w"] > 0 for p in data["panels"])


def test_every_panel_has_queries_on_the_chosen_data_source():
    data = json.loads(COMMITTED.read_text(encoding="utf-8"))
    panels = _grafana_panels(data)
    assert [p["title"] for p in panels] == [spec.title for spec in board_panels.panels()]
    for panel, spec in zip(panels, board_panels.panels()):
        assert panel["targets"], panel["title"]
        assert [t["expr"] for t in panel["targets"]] == [q.expr for q in spec.queries]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        for target in [panel, *panel["targets"]]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for query in spec.queries:
            assert query.serves in (board_panels.EVERY, board_panels.UNCACHED, board_panels.CACHED)
            # Every query is narrowed by every variable, and nothing is left for Prometheus to choke on.
            assert board_panels.SELECTOR in query.expr, (panel["title"], query.expr)
            assert "$" not in board_panels.resolve(query.expr), query.expr
    titles = {p["title"] for p in panels}
    assert {"Requests per second", "Failures per second, by reason", "Refusals per second"} <= titles
    assert {"End to end: p50, p99 and mean", "Per step: compute p50 and p99", "Queue time: mean and p99"} <= titles
    assert {"Compute input, infer, output: mean per request", "Cache hits and misses per second"} <= titles


def test_a_panel_on_a_metric_triton_does_not_export_is_refused():
    assert board_panels.unknown_metrics() == {}
    wrong = board_panels.PanelSpec(
        "Latency in ms",
        "ms",
        "a name Triton never used",
        (board_panels.Query(f"nv_inference_request_summary_ms{{{board_panels.SELECTOR}}}", board_panels.LEGEND),),
    )
    rows = (*board_panels.ROWS, ("Mistakes", (wrong,)))
    assert board_panels.unknown_metrics(rows) == {"Latency in ms": {"nv_inference_request_summary_ms"}}
    with pytest.raises(ErnieDeployError, match=r"Latency in ms: nv_inference_request_summary_ms") as e:
        board.dashboard(rows=rows)
    assert "nv_inference_request_summary_us" in e.value.fix


def test_the_latency_panels_need_the_summaries_every_deployment_starts_with():
    used = {name for spec in board_panels.panels() for q in spec.queries for name in board_panels.metric_names(q.expr)}
    assert any(name.endswith("_summary_us") for name in used)
    assert "--metrics-config=summary_latencies=true" in server_args("/models")


def test_the_command_writes_the_options(tmp_path, capsys):
    out = tmp_path / "grafana" / "board.json"
    argv = ["dashboard", "--out", str(out), "--title", "Serving", "--uid", "serving-1", "--datasource", "prom-eu"]
    assert main(argv) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert (data["title"], data["uid"]) == ("Serving", "serving-1")
    assert data["templating"]["list"][0]["current"] == {"selected": True, "text": "prom-eu", "value": "prom-eu"}
    assert "current" not in json.loads(board.render())["templating"]["list"][0]

    for bad, message in (
        (["--uid", "has space"], "is not a Grafana dashboard uid"),
        (["--title", " "], "--title is empty"),
        (["--datasource", ""], "--datasource is empty"),
    ):
        target = tmp_path / "refused.json"
        assert main(["dashboard", "--out", str(target), *bad]) == 2
        assert message in capsys.readouterr().err
        assert not target.exists()


# -- every query on a real Prometheus scraping a real server ----------------------------------------------------------


def _label_values(prom: _Prometheus, query: str) -> set[str]:
    """What Grafana lists for a `label_values(selector, label)` variable, asked of Prometheus' API."""
    selector, label = re.fullmatch(r"label_values\((.*), (\w+)\)", board_panels.resolve(query)).groups()
    return set(prom.api(f"label/{label}/values?{urllib.parse.urlencode({'match[]': selector})}"))


def _check_every_panel(server, repository: Path, tmp_path: Path, send) -> None:
    """Start Prometheus on `server`, run `send()`, then require series from every query for the models it serves."""
    served = _served_models(server)
    asking = set(models_asking_for_cache(repository))
    wanted = {
        board_panels.EVERY: served,
        board_panels.UNCACHED: {(m, v) for m, v in served if m not in asking},
        board_panels.CACHED: {(m, v) for m, v in served if m in asking},
    }
    prom = _Prometheus(tmp_path, server.metrics_url.split("//")[1].split("/")[0])
    try:
        prom.wait_ready()
        send()

        def missing() -> dict:
            gaps = {}
            for spec in board_panels.panels():
                shown = set()
                for query in spec.queries:
                    found = {
                        (r["metric"]["model"], r["metric"]["version"])
                        for r in prom.query(board_panels.resolve(query.expr))
                    }
                    shown |= found
                    if wanted[query.serves] - found:
                        gaps[(spec.title, query.legend)] = sorted(wanted[query.serves] - found)
                    if query.serves == board_panels.CACHED and found - wanted[board_panels.CACHED]:
                        gaps[(spec.title, query.legend, "uncached")] = sorted(found - wanted[board_panels.CACHED])
                # Every served model has a row in each panel but the cache's.
                expected = wanted[board_panels.CACHED] if spec.queries[0].serves == board_panels.CACHED else served
                if expected - shown:
                    gaps[spec.title] = sorted(expected - shown)
            return gaps

        gaps = _wait_for(missing, timeout=60.0, interval=1.0)
        assert not gaps, f"panels without series for served models: {gaps}"
        # The names the queries read are real ones (those of the cache panels where a model has the cache).
        exported = set(prom.api("label/__name__/values"))
        used = {
            name
            for spec in board_panels.panels()
            for query in spec.queries
            if wanted[query.serves]
            for name in board_panels.metric_names(query.expr)
        }
        assert used <= exported, f"not exported by Triton: {used - exported}"
        assert used <= board_panels.TRITON_METRICS

        job, instance, model, version = (query for _, _, query in board_panels.VARIABLES)
        assert _label_values(prom, job) == {"triton"}
        assert _label_values(prom, instance) == {server.metrics_url.split("//")[1].split("/")[0]}
        assert _label_values(prom, model) == {m for m, _ in served}
        assert _label_values(prom, version) >= {v for _, v in served}
    finally:
        prom.stop()


@pytest.mark.integration
def test_every_panel_has_series_for_every_served_model(server, repository, tmp_path):
    """The demo repository in the default (fused) layout: every query has a series per served model and version, the
    cache panels none (no model there is built with the cache)."""
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.core.tasks import SEQ_CLS, TOKEN_CLS

    def send() -> None:
        for task, text in (
            (SEQ_CLS, "国足公布世预赛名单"),
            (TOKEN_CLS, "国务院总理李鹏今天在人民大会堂会见了日本客人"),
        ):
            with Client(task, server.grpc_url) as client:
                for _ in range(5):
                    client.infer([text])

    assert not models_asking_for_cache(repository)
    _check_every_panel(server, repository, tmp_path, send)


@pytest.mark.integration
def test_every_panel_has_series_on_ensembles_and_the_cache(cache_server, tmp_path):  # noqa: F811
    """test_cache.py's server: ensembles with and without the response cache, and a tokenizer-in-model model with it,
    so every step is its own Triton model. Each query has series for every served model and version, except that the
    cache panels have them for the models built with the cache and only those (Triton exports the per-model cache
    counters for no other), and the end-to-end quantiles for the models without it (Triton 2.51 has no request summary
    for a model with the cache: its mean, from the counters, is drawn instead)."""
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.core.tasks import SEQ_CLS

    server, repository = cache_server
    assert set(models_asking_for_cache(repository)) == {"news", "tnews"}

    def send() -> None:
        for name in ("news", "plain", "tnews"):
            with Client(SEQ_CLS, server.grpc_url, model=name) as client:
                for i in range(6):  # three texts twice: misses, then hits where the cache is on
                    client.infer([f"体育 新闻 {i % 3}"])

    _check_every_panel(server, repository, tmp_path, send)
