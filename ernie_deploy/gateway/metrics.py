"""The gateway's own Prometheus series (GET /metrics), in a registry of its own (one per app, so two gateways in one
process never share counts): requests and errors by route and status, and a latency histogram by route. Routes are
the route templates (`/hf/{model}`), never the path a client sent, so an unknown model name adds no series."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Seconds. From a tiny model's ~2 ms answer through a demo model's tens of ms to the 60 s Triton timeout.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "ernie_gateway_requests",
            "HTTP requests answered, by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.errors = Counter(
            "ernie_gateway_errors",
            "HTTP requests answered with an error (status >= 400), by route, status and error type",
            ["route", "status", "error_type"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ernie_gateway_request_duration_seconds",
            "Time to answer a request, by route",
            ["route"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "ernie_gateway_inference_in_flight", "Inference requests being answered now", registry=self.registry
        )
        self.merged_calls = Counter(
            "ernie_gateway_merged_calls",
            "Triton calls that carried the requests of more than one client (--coalesce-ms)",
            registry=self.registry,
        )
        self.merged_requests = Counter(
            "ernie_gateway_merged_requests",
            "Client requests answered through a merged Triton call (or, when it failed, part by part after it)",
            registry=self.registry,
        )
        self.resent_calls = Counter(
            "ernie_gateway_merged_calls_resent",
            "Merged Triton calls refused or failed as a whole, whose requests were then sent again each on its own",
            registry=self.registry,
        )
        # Each (route, status)'s series, looked up once: labels() takes a lock and builds its key on every call
        # (observe took 29 us a request under cProfile, 13 us so: docs/gateway-profile.json).
        self._series: dict[tuple[str, int], tuple] = {}

    def count_in_flight(self, read) -> None:
        """The in-flight gauge read from `read()` when scraped, instead of set twice on every request."""
        self.in_flight.set_function(read)

    def observe(self, route: str, status: int, seconds: float, error_type: str | None = None) -> None:
        series = self._series.get((route, status))
        if series is None:
            series = self._series[route, status] = (
                self.requests.labels(route, str(status)),
                self.latency.labels(route),
            )
        series[0].inc()
        series[1].observe(seconds)
        if status >= 400:
            self.errors.labels(route, str(status), error_type or "").inc()

    def merged(self, requests: int) -> None:
        """A Triton call carried `requests` clients' requests."""
        self.merged_calls.inc()
        self.merged_requests.inc(requests)

    def resent(self) -> None:
        """A merged call failed as a whole and its requests were sent again, each on its own."""
        self.resent_calls.inc()
