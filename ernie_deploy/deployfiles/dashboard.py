"""The Grafana dashboard for ernie-deploy's Triton servers (`ernie-deploy dashboard`): per model and version, requests,
failures and refusals, latency p50 and p99 end to end and per step, queue time, compute input/infer/output, the
response cache's hits and misses, what the models answer (label shares, low confidence and text lengths against the
reference, drift) and a shadowed candidate's agreement, failures and latency, read from the Prometheus job that
deploy/prometheus/ scrapes.

The panels are data (dashboard_panels.py); dashboard() turns them into Grafana's dashboard JSON with Grafana's
foundation SDK (grafana-foundation-sdk, in the dev extra, imported only when a dashboard is built). The committed
deploy/grafana/ernie-deploy.json is this module's output with the defaults; tests/test_dashboard.py checks that, and
runs every panel's query on a real Prometheus scraping a real server.
"""

from __future__ import annotations

import json
import os
import re
import string
import warnings
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError, InstallError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.deployfiles.dashboard_panels import ROWS, panels, unknown_metrics
from ernie_deploy.deployfiles.dashboard_queries import SERVED_METRICS, TRITON_METRICS, VARIABLES

DEFAULT_TITLE = "ernie-deploy: Triton models"
DEFAULT_UID = "ernie-deploy-triton"
DEFAULT_OUT = Path("deploy") / "grafana" / "ernie-deploy.json"


def _check(title: str, uid: str, datasource: str | None, rows) -> None:
    if not title.strip():
        raise BadOptionsError("--title is empty", "give the dashboard a title, or leave --title out for the default")
    # Grafana's rule for a dashboard uid: at most 40 letters, digits, '-' and '_'.
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid):
        raise BadOptionsError(
            f"--uid {uid!r} is not a Grafana dashboard uid", "use at most 40 letters, digits, '-' and '_'"
        )
    if datasource is not None and not datasource.strip():
        raise BadOptionsError(
            "--datasource is empty", "give the uid or name of a Prometheus data source, or leave it out for the default"
        )
    crowded = [panel.title for panel in panels(rows) if len(panel.queries) > len(string.ascii_uppercase)]
    if crowded:  # each query needs its own reference letter
        raise BadOptionsError(
            f"panels with more than {len(string.ascii_uppercase)} queries: {', '.join(crowded)}",
            "split them into several panels",
        )
    unknown = unknown_metrics(rows)
    if unknown:
        listed = "; ".join(f"{title}: {', '.join(sorted(names))}" for title, names in unknown.items())
        raise BadOptionsError(
            f"panels query metrics that neither Triton 2.51 nor ernie-deploy's steps export ({listed})",
            "use the names Triton exports (ernie_deploy.deployfiles.dashboard_queries.TRITON_METRICS, read from a live "
            f"server's metrics port): {', '.join(sorted(TRITON_METRICS))}; or ernie-deploy's own "
            f"(SERVED_METRICS): {', '.join(sorted(SERVED_METRICS))}",
        )


def _sdk():
    try:
        # The SDK's classic-dashboard classes warn at import that its v2 schema is preferred. That schema is the
        # resource of Grafana 12's new dashboard API; the classic JSON built here is what the Import page and file
        # provisioning read, in older Grafana too, so the warning is not for us.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Prefer using dashboardv2", DeprecationWarning)
            from grafana_foundation_sdk.builders import common, dashboard, prometheus, timeseries
            from grafana_foundation_sdk.cog.encoder import JSONEncoder
            from grafana_foundation_sdk.models import common as common_models
            from grafana_foundation_sdk.models import dashboard as dashboard_models
    except ImportError:
        raise InstallError(
            "grafana-foundation-sdk is not installed",
            "pip install -e '.[dev]' (it is pinned there; the SDK needs Python 3.11 or later)",
        ) from None
    return common, dashboard, prometheus, timeseries, JSONEncoder, common_models, dashboard_models


def dashboard(title: str = DEFAULT_TITLE, uid: str = DEFAULT_UID, datasource: str | None = None, rows=ROWS) -> dict:
    """Grafana's JSON model of the dashboard (what its Import page and provisioning read), as a dict.

    datasource: the uid or name of the Prometheus data source it opens on; None: Grafana's default one. Either way the
    data-source variable at the top switches every panel.
    """
    _check(title, uid, datasource, rows)
    common, builders, prometheus, timeseries, JSONEncoder, common_models, models = _sdk()
    source = common_models.DataSourceRef(type_val="prometheus", uid="${datasource}")
    every = models.VariableOption(selected=True, text="All", value="$__all")

    board = (
        builders.Dashboard(title)
        .uid(uid)
        .description(
            "Triton serving ernie-deploy's models, per model and version, from Prometheus (job triton): traffic, "
            "latency, the response cache, what the models answer against their reference, and shadowed candidates."
        )
        .tags(["ernie-deploy", "triton"])
        .time("now-1h", "now")
        .refresh("30s")
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
    )
    variable = builders.DatasourceVariable("datasource").label("Data source").type("prometheus")
    if datasource is not None:
        variable = variable.current(models.VariableOption(selected=True, text=datasource, value=datasource))
    board = board.with_variable(variable)
    for name, label, query in VARIABLES:
        board = board.with_variable(
            builders.QueryVariable(name)
            .label(label)
            .datasource(source)
            .query(query)
            .definition(query)
            .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(models.VariableSort.NATURAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".+")
            .current(every)
        )

    ids = iter(range(1, 1000))
    for row_title, row in rows:
        board = board.with_row(builders.Row(row_title).id(next(ids)))
        for spec in row:
            legend = (
                common.VizLegendOptions()
                .show_legend(True)
                .display_mode(common_models.LegendDisplayMode.TABLE)
                .placement(common_models.LegendPlacement.BOTTOM)
                .calcs(["mean", "max", "lastNotNull"])
            )
            panel = (
                timeseries.Panel()
                .id(next(ids))
                .title(spec.title)
                .description(spec.description)
                .datasource(source)
                .unit(spec.unit)
                .min(0)
                .span(12)
                .height(9)
                .legend(legend)
                .tooltip(
                    common.VizTooltipOptions()
                    .mode(common_models.TooltipDisplayMode.MULTI)
                    .sort(common_models.SortOrder.DESCENDING)
                )
            )
            if spec.max is not None:
                panel = panel.max(spec.max)
            if spec.thresholds:  # an alert's threshold, dashed across the panel
                steps = [models.Threshold(value=None, color="green")]
                steps += [models.Threshold(value=value, color="red") for value in spec.thresholds]
                panel = panel.thresholds(
                    builders.ThresholdsConfig().mode(models.ThresholdsMode.ABSOLUTE).steps(steps)
                ).thresholds_style(
                    common.GraphThresholdsStyleConfig().mode(common_models.GraphThresholdsStyleMode.DASHED)
                )
            for ref, query in zip(string.ascii_uppercase, spec.queries, strict=False):
                panel = panel.with_target(
                    prometheus.Dataquery().ref_id(ref).datasource(source).expr(query.expr).legend_format(query.legend)
                )
            board = board.with_panel(panel)
    return json.loads(JSONEncoder(sort_keys=True).encode(board.build()))


def render(title: str = DEFAULT_TITLE, uid: str = DEFAULT_UID, datasource: str | None = None) -> str:
    """The dashboard as the JSON text `write` writes."""
    return json.dumps(dashboard(title, uid, datasource), ensure_ascii=False, indent=2, sort_keys=True) + "\n"


def write(
    out: str | os.PathLike = DEFAULT_OUT,
    title: str = DEFAULT_TITLE,
    uid: str = DEFAULT_UID,
    datasource: str | None = None,
) -> Path:
    """Write the dashboard's JSON to `out` atomically; returns the path."""
    text = render(title, uid, datasource)  # built and checked before anything is written
    path = Path(out)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
