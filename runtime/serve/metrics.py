"""What ``parley serve`` tells a monitoring system: ``GET /metrics`` in Prometheus' text format
(``prometheus_client``), one registry per server.

- ``parley_turns_total``: finished turns; ``parley_turn_failures_total{code}``: failed ones by their
  code (``runtime/session/failures.py``).
- ``parley_turn_seconds`` and ``parley_time_to_first_token_seconds``: from the turn's start on the
  server to its end, and to its first token.
- ``parley_turns_running`` and ``parley_turns_waiting``: turns computing, and turns waiting for one
  of the ``--workers`` places.
- ``parley_sessions``: sessions held; ``parley_lines_queued``: players' lines waiting behind their
  session's running turn (double_text: queue).
- ``parley_kv_contexts{state}`` and ``parley_kv_mib{state}``: the embedded engine's node contexts,
  live, parked (in RAM) and spilled (parked on disk, past ``--park-budget``); absent on a backend
  that keeps no caches here.
- ``parley_store_write_seconds``: each write to the session store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds: a scripted turn takes a millisecond, a model's reply seconds to a minute
TURN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
WRITE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class _Held(Collector):
    """The gauges read when scraped: sessions, and the backend's KV contexts."""

    def __init__(self, sessions: Callable[[], int], kv_stats: Callable[[], Any] | None,
                 queued: Callable[[], int]) -> None:
        self._sessions, self._kv_stats, self._queued = sessions, kv_stats, queued

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("parley_sessions", "Sessions the server holds", value=self._sessions())
        yield GaugeMetricFamily("parley_lines_queued", "Lines waiting behind their session's running turn",
                                value=self._queued())
        if self._kv_stats is None:
            return
        stats = self._kv_stats()
        contexts = GaugeMetricFamily("parley_kv_contexts", "Node contexts of the embedded engine",
                                     labels=["state"])
        contexts.add_metric(["live"], stats.live_contexts)
        contexts.add_metric(["parked"], stats.parked)
        contexts.add_metric(["spilled"], stats.spilled)
        yield contexts
        mib = GaugeMetricFamily("parley_kv_mib", "What those contexts take, in MiB", labels=["state"])
        mib.add_metric(["live"], stats.live_mib)
        mib.add_metric(["parked"], stats.parked_mib)
        mib.add_metric(["spilled"], stats.spilled_mib)
        yield mib


class Metrics:
    """The server's counters, histograms and gauges, in a registry of its own."""

    def __init__(self, sessions: Callable[[], int], backend: object, queued: Callable[[], int] = lambda: 0) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter("parley_turns", "Turns that finished", registry=r)
        self.failures = Counter("parley_turn_failures", "Turns that failed, by code", ["code"], registry=r)
        self.turn_seconds = Histogram("parley_turn_seconds", "A turn's time on the server, start to end",
                                      buckets=TURN_BUCKETS, registry=r)
        self.first_token = Histogram("parley_time_to_first_token_seconds",
                                     "From a turn's start on the server to its first token",
                                     buckets=TURN_BUCKETS, registry=r)
        self.running = Gauge("parley_turns_running", "Turns computing now", registry=r)
        self.waiting = Gauge("parley_turns_waiting", "Turns waiting for a place to compute (--workers)",
                             registry=r)
        self.store_write = Histogram("parley_store_write_seconds", "Each write to the session store",
                                     buckets=WRITE_BUCKETS, registry=r)
        kv_stats = getattr(backend, "kv_stats", None)
        r.register(_Held(sessions, kv_stats if callable(kv_stats) else None, queued))

    def text(self) -> bytes:
        return generate_latest(self.registry)
