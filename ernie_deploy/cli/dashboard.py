"""`ernie-deploy dashboard`: the Grafana dashboard for the served models, over the Prometheus in deploy/prometheus/."""

from __future__ import annotations

from ernie_deploy.deployfiles.dashboard import DEFAULT_OUT, DEFAULT_TITLE, DEFAULT_UID, write


def register(sub) -> None:
    p = sub.add_parser(
        "dashboard",
        help="Grafana dashboard JSON: per model and version, requests, failures, latency p50/p99 end to end and per "
        "step, queue time and response-cache hits, from Prometheus",
    )
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"the JSON file to write (default: {DEFAULT_OUT})")
    p.add_argument("--title", default=DEFAULT_TITLE, help="the dashboard's title")
    p.add_argument(
        "--uid",
        default=DEFAULT_UID,
        help="the dashboard's uid: importing a dashboard with the same uid replaces it (default: %(default)s)",
    )
    p.add_argument(
        "--datasource",
        default=None,
        metavar="UID_OR_NAME",
        help="the Prometheus data source it opens on, by uid or name (default: Grafana's default data source; the "
        "dashboard's data-source menu switches it either way)",
    )
    p.set_defaults(func=run)


def run(args) -> None:

    path = write(args.out, title=args.title, uid=args.uid, datasource=args.datasource)
    print(f"wrote {path}")
    print("Import it in Grafana (Dashboards > New > Import), or put it in a dashboard provisioning folder.")
