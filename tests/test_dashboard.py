"""The Grafana dashboard (`ernie-deploy dashboard`, deploy/grafana/ernie-deploy.json): the committed file is the
generator's output, it is dashboard JSON as Grafana's SDK reads and writes it, every panel has queries and a panel on a
metric Triton does not export is refused; and on a real Prometheus scraping a real server, every panel's query has
series for every served model and version (the cache panels for the models built with the cache, and only those; the
panels of what a model answers for the models exporting those series), and the variables list them. The drift panel
draws drift.yml's divergence with its alerts' thresholds.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest
import yaml

from ernie_deploy.cli import main
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.deployfiles import dashboard as board
from ernie_deploy.deployfiles import dashboard_panels as board_panels
from ernie_deploy.deployfiles import dashboard_queries as board_queries
from ernie_deploy.deployfiles import drift_rules
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
            assert query.serves in (
                board_queries.EVERY,
                board_queries.UNCACHED,
                board_queries.CACHED,
                board_queries.WATCHED,
            )
            assert bool(query.needs) == (query.serves == board_queries.WATCHED), query
            # Every query is narrowed by every variable, and nothing is left for Prometheus to choke on.
            assert board_queries.SELECTOR in query.expr, (panel["title"], query.expr)
            assert "$" not in board_queries.resolve(query.expr), query.expr
    titles = {p["title"] for p in panels}
    assert {"Requests per second", "Failures per second, by reason", "Refusals per second"} <= titles
    assert {"End to end: p50, p99 and mean", "Per step: compute p50 and p99", "Queue time: mean and p99"} <= titles
    assert {"Compute input, infer, output: mean per request", "Cache hits and misses per second"} <= titles
    assert {
        "Answers per label: share",
        "Low-confidence answers: share vs reference",
        "Text length: share per bucket of characters",
        "Drift from the reference: Jensen-Shannon divergence per series, over 30m",
        "Shadow agreement",
        "Shadow failed and skipped per second",
        "Shadow candidate latency p95",
    } <= titles


def test_the_drift_panel_draws_what_the_drift_alerts_read():
    """The drift panel's query is drift.yml's divergence over the same window (one builder for both), narrowed by the
    variables, with the alerts' thresholds as dashed lines; the confidence panel's alert level is the alert's."""
    data = json.loads(COMMITTED.read_text(encoding="utf-8"))
    by_title = {p["title"]: p for p in _grafana_panels(data)}
    drift = by_title[
        f"Drift from the reference: Jensen-Shannon divergence per series, over {drift_rules.DEFAULT_WINDOW}"
    ]
    (target,) = drift["targets"]
    assert target["expr"] == drift_rules.js_divergence(
        drift_rules.live_share(drift_rules.DEFAULT_WINDOW, board_queries.SELECTOR),
        drift_rules.reference_share(board_queries.SELECTOR),
    )
    assert f"[{drift_rules.DEFAULT_WINDOW}]" in target["expr"]
    steps = drift["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps[1:]] == sorted({drift_rules.ANSWER_JS, drift_rules.CHARS_JS})
    assert drift["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"] == {"mode": "dashed"}
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "drift.yml").read_text())
    alerts = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    for value in steps[1:]:
        assert any(f"> {value['value']:g}" in expr for expr in alerts.values())
    level = by_title["Low-confidence answers: share vs reference"]["targets"][2]["expr"]
    assert level.endswith(f"+ {drift_rules.LOW_CONFIDENCE_RISE:g}")
    assert f"> {drift_rules.LOW_CONFIDENCE_RISE:g}" in alerts["ErnieDeployConfidenceCollapse"]
    shadow = by_title["Shadow candidate latency p95"]["targets"][0]["expr"]
    assert shadow.startswith("histogram_quantile(0.95,") and "ernie_deploy_shadow_candidate_seconds_bucket" in shadow


def test_every_panel_query_parses_as_promql(tmp_path):
    """Every query, its variables filled in, checked by promtool's parser (as a recording rule), so a query the
    integration tests cannot run (the shadow's, without a shadow) is still valid PromQL."""
    from tests.test_prometheus import _promtool

    rules = [
        {"record": f"dashboard:query_{i}", "expr": board_queries.resolve(query.expr)}
        for i, query in enumerate(q for spec in board_panels.panels() for q in spec.queries)
    ]
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert f"SUCCESS: {len(rules)} rules found" in _promtool("check", "rules", "queries.yml", cwd=tmp_path)


def test_a_panel_on_a_metric_triton_does_not_export_is_refused():
    assert board_panels.unknown_metrics() == {}
    wrong = board_panels.PanelSpec(
        "Latency in ms",
        "ms",
        "a name Triton never used",
        (board_queries.Query(f"nv_inference_request_summary_ms{{{board_queries.SELECTOR}}}", board_queries.LEGEND),),
    )
    rows = (*board_panels.ROWS, ("Mistakes", (wrong,)))
    assert board_panels.unknown_metrics(rows) == {"Latency in ms": {"nv_inference_request_summary_ms"}}
    with pytest.raises(ErnieDeployError, match=r"Latency in ms: nv_inference_request_summary_ms") as e:
        board.dashboard(rows=rows)
    assert "nv_inference_request_summary_us" in e.value.fix


def test_the_latency_panels_need_the_summaries_every_deployment_starts_with():
    used = {name for spec in board_panels.panels() for q in spec.queries for name in board_queries.metric_names(q.expr)}
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
    selector, label = re.fullmatch(r"label_values\((.*), (\w+)\)", board_queries.resolve(query)).groups()
    return set(prom.api(f"label/{label}/values?{urllib.parse.urlencode({'match[]': selector})}"))


def _check_every_panel(server, repository: Path, tmp_path: Path, send) -> None:
    """Start Prometheus on `server`, run `send()`, then require series from every query for the models it serves."""
    served = _served_models(server)
    asking = set(models_asking_for_cache(repository))
    wanted = {
        board_queries.EVERY: served,
        board_queries.UNCACHED: {(m, v) for m, v in served if m not in asking},
        board_queries.CACHED: {(m, v) for m, v in served if m in asking},
    }
    prom = _Prometheus(tmp_path, server.metrics_url.split("//")[1].split("/")[0])
    try:
        prom.wait_ready()
        # One scrape before the requests: the share panels divide rates of the answers counted, which a counter
        # first seen with the requests already in it would show as none.
        assert not _wait_for(lambda: not prom.query('up{job="triton"} == 1')), prom.query("up")
        send()

        def wanted_by(query) -> set:
            """The (model, version) a query must draw: by its category, or those exporting what it needs (a model's
            answers, its reference, a shadow)."""
            if query.serves != board_queries.WATCHED:
                return wanted[query.serves]
            return {(r["metric"]["model"], r["metric"]["version"]) for r in prom.query(query.needs)}

        def missing() -> dict:
            gaps = {}
            for spec in board_panels.panels():
                shown = set()
                for query in spec.queries:
                    found = {
                        (r["metric"]["model"], r["metric"]["version"])
                        for r in prom.query(board_queries.resolve(query.expr))
                    }
                    shown |= found
                    want = wanted_by(query)
                    if want - found:
                        gaps[(spec.title, query.legend)] = sorted(want - found)
                    if query.serves in (board_queries.CACHED, board_queries.WATCHED) and found - want:
                        gaps[(spec.title, query.legend, "not wanted")] = sorted(found - want)
                # Every served model has a row in each panel but the cache's and those of series some models export.
                first = spec.queries[0]
                expected = served if first.serves in (board_queries.EVERY, board_queries.UNCACHED) else wanted_by(first)
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
            if wanted_by(query)
            for name in board_queries.metric_names(query.expr)
        }
        assert used <= exported, f"not exported by Triton: {used - exported}"
        assert used <= board_queries.KNOWN_METRICS

        job, instance, model, version = (query for _, _, query in board_queries.VARIABLES)
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
