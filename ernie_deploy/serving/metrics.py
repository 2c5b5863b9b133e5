"""Counts a serving step adds up, pushed to Triton's custom metrics (the server's own /metrics) in the background.

One call of the python backend's metrics API is a round trip to the server process: 120-160 us each, measured on
the pip server (2.51) from `initialize` and from a thread. A request that touched even five series would pay more
than the whole monitoring budget (0.1 ms at concurrency 1), so a request only adds to counts in this process, and a
daemon thread pushes what was added once a second: a count reaches /metrics within about a second, a scrape
interval's worth, and no request ever waits on the metrics API. What was added but not pushed when the model
unloads is pushed by `close`.

Outside Triton (tests, offline use) there is no metrics API: the counts are kept and read back from `totals`.
"""

from __future__ import annotations

import threading

# How often the pusher runs, in seconds: about Prometheus' shortest useful scrape interval.
PUSH_INTERVAL_S = 1.0

Key = tuple[str, tuple[tuple[str, str], ...]]  # (family, sorted labels)


def metric_key(family: str, labels: dict[str, str]) -> Key:
    return family, tuple(sorted(labels.items()))


class Counts:
    """Counters and gauges by family and labels: added to by any thread, pushed by one."""

    def __init__(self, descriptions: dict[str, str], push_interval_s: float = PUSH_INTERVAL_S):
        self.descriptions = descriptions
        self._lock = threading.Lock()
        self._push_lock = threading.Lock()
        self._pending: dict[Key, float] = {}
        self._gauges: dict[Key, float] = {}
        self.totals: dict[Key, float] = {}  # what was added since load, for tests and offline use
        self._pb = _python_backend()
        self._families: dict[str, object] = {}
        self._metrics: dict[Key, object] = {}
        self._stop = threading.Event()
        self._thread = None
        if self._pb is not None:
            self._thread = threading.Thread(target=self._loop, args=(push_interval_s,), daemon=True, name="metrics")
            self._thread.start()

    def add(self, family: str, labels: dict[str, str], value: float = 1.0) -> None:
        key = metric_key(family, labels)
        with self._lock:
            self._pending[key] = self._pending.get(key, 0.0) + value
            self.totals[key] = self.totals.get(key, 0.0) + value

    def add_many(self, family: str, labels: dict[str, str], counts: dict[tuple[str, ...], float], names: tuple):
        """`counts` keyed by the values of `names`, each added under `labels` plus those names."""
        with self._lock:
            for values, value in counts.items():
                key = metric_key(family, {**labels, **dict(zip(names, values))})
                self._pending[key] = self._pending.get(key, 0.0) + value
                self.totals[key] = self.totals.get(key, 0.0) + value

    def add_keys(self, values: dict[Key, float]) -> None:
        """Many counters at once, by their keys (`metric_key`): one lock for a whole batch's counts."""
        with self._lock:
            for key, value in values.items():
                self._pending[key] = self._pending.get(key, 0.0) + value
                self.totals[key] = self.totals.get(key, 0.0) + value

    def declare(self, family: str, labels: dict[str, str]) -> None:
        """A counter that exists at 0 before anything is added (a bucket no answer fell in yet still has a share)."""
        self.add(family, labels, 0.0)

    def set(self, family: str, labels: dict[str, str], value: float) -> None:
        key = metric_key(family, labels)
        with self._lock:
            self._gauges[key] = value
            self.totals[key] = value

    def value(self, family: str, **labels: str) -> float:
        return self.totals.get(metric_key(family, labels), 0.0)

    def push(self) -> None:
        """What was added since the last push, to Triton (nothing outside Triton)."""
        if self._pb is None:
            return
        with self._push_lock:  # one push at a time: a metric is made once
            self._push()

    def _push(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            gauges, self._gauges = self._gauges, {}
        # A metric Triton refuses (the server going away) must not end the pushes of the others.
        for key, value in pending.items():
            try:
                self._metric(key, self._pb.MetricFamily.COUNTER).increment(value)
            except Exception:  # kept for the next push, not lost
                with self._lock:
                    self._pending[key] = self._pending.get(key, 0.0) + value
        for key, value in gauges.items():
            try:
                self._metric(key, self._pb.MetricFamily.GAUGE).set(value)
            except Exception:
                with self._lock:
                    self._gauges.setdefault(key, value)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.push()

    def _metric(self, key: Key, kind):
        metric = self._metrics.get(key)
        if metric is None:
            family, labels = key
            if family not in self._families:
                self._families[family] = self._pb.MetricFamily(
                    name=family, description=self.descriptions.get(family, family), kind=kind
                )
            metric = self._metrics[key] = self._families[family].Metric(labels=dict(labels))
        return metric

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.push()


def _python_backend():
    try:
        import triton_python_backend_utils as pb
    except ImportError:
        return None
    return pb if hasattr(pb, "MetricFamily") else None
