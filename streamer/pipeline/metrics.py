"""Prometheus metrics of the streamer and the HTTP server for ``/metrics`` and ``/healthz``.

Each ``StreamMetrics`` has its own registry, so several streamers (or tests)
in one process do not collide; the wiring registers the lifecycle's counters
(archive, drift, registry: ``streamer.lifecycle.metrics``) on the same
registry. ``/metrics`` also serves prometheus_client's process-wide
registry, where the process/GC collectors live. ``/healthz`` answers 200 while the consumer
loop has completed an iteration within ``stale_s`` seconds, else 503. Each request has a thread of its own and
``request_timeout_s`` to arrive, so a client that connects and sends nothing holds neither the other requests nor
the streamer's exit.

>>> m = StreamMetrics()
>>> m.events.labels("scored").inc(3)
>>> b"kdsm_events_total" in m.render()
True
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from offline_train.config import ConfigError

_LAT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class StreamMetrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.events = Counter("kdsm_events", "events consumed, by result (scored | dead_letter)", ["result"], registry=r)
        self.alerts = Counter("kdsm_alerts", "alerts published, by severity", ["severity"], registry=r)
        self.alerts_by_part = Counter("kdsm_alerts_by_part", "alerts published, by the score part they were led by "
                                      "(network | isolation | knn; models with the blend only)", ["part"], registry=r)
        self.dead_letters = Counter("kdsm_dead_letters", "events sent to the dead-letter topic, by reason", ["reason"], registry=r)
        self.batch_size = Histogram("kdsm_batch_size", "events per micro-batch", registry=r,
                                    buckets=(1, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10000))
        self.batch_seconds = Histogram("kdsm_batch_seconds", "decode + score + publish time of a batch", registry=r, buckets=_LAT_BUCKETS)
        self.e2e_seconds = Histogram("kdsm_e2e_latency_seconds", "Kafka record timestamp to offset commit (sampled per batch)",
                                     registry=r, buckets=_LAT_BUCKETS)
        self.alert_seconds = Histogram("kdsm_alert_latency_seconds", "Kafka record timestamp to its alert acknowledged by the broker",
                                       registry=r, buckets=_LAT_BUCKETS)
        self.device = Gauge("kdsm_scorer_device_info", "1 for the device the scorer runs on", ["device"], registry=r)
        self.model = Gauge("kdsm_model_info", "1 for the model version in use", ["version", "schema_hash"], registry=r)
        self.last_commit = Gauge("kdsm_last_commit_timestamp_seconds", "unix time of the last offset commit", registry=r)
        self.commits = Counter("kdsm_commits", "offset commits, by outcome (ok | failed | aborted: an exactly-once transaction)", ["outcome"], registry=r)
        self.redis_up = Gauge("kdsm_redis_up", "1 while Redis (live thresholds) answers, 0 while the cached thresholds are used", registry=r)
        self.threshold = Gauge("kdsm_threshold", "threshold in force, by model version and severity", ["version", "severity"], registry=r)
        self.paused = Counter("kdsm_backpressure_pauses", "times the partitions were paused because max_in_flight batches were unacknowledged", registry=r)
        self.in_flight = Gauge("kdsm_in_flight_batches", "batches published but not yet committed", registry=r)
        self.assigned = Gauge("kdsm_assigned_partitions", "partitions this streamer owns", registry=r)
        self.rebalances = Counter("kdsm_rebalances", "partition revocations and assignments", ["kind"], registry=r)
        self.sink_errors = Counter("kdsm_sink_errors", "exceptions raised by post-commit sinks", ["sink"], registry=r)
        self.delivery_errors = Counter("kdsm_delivery_errors", "alert/dead-letter sends the broker did not acknowledge", registry=r)
        self.fallbacks = Counter("kdsm_publish_fallbacks", "alerts/dead letters replaced by a small fallback record after the producer or broker refused them, by topic",
                                 ["topic"], registry=r)
        self.last_loop = time.time()

    def render(self) -> bytes:
        """This streamer's metrics, then the process-wide ones (names do not overlap)."""
        return generate_latest(self.registry) + generate_latest(REGISTRY)


class _QuietHandler(WSGIRequestHandler):
    timeout = 5.0  # seconds a request may take to arrive (StreamRequestHandler sets it on the socket)

    def handle(self):
        try:
            super().handle()
        except OSError:  # a client that sent nothing in time, or went away: nothing to answer, nothing to log
            pass

    def log_message(self, *args):  # access logs would drown the JSON logs
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    """One thread per request: wsgiref's own server answers one at a time, so one idle connection held them all.

    The threads are daemons and ``server_close`` does not join them: a handler waiting on a silent client never
    holds up the streamer's exit (it ends at its timeout, or with the process)."""

    daemon_threads = True
    block_on_close = False


def bind_error(host: str, port: int, e: Exception) -> ConfigError:
    """The ``ConfigError`` (one line, exit 2) for a metrics server that cannot listen on ``host:port``.

    >>> print(bind_error("127.0.0.1", 9108, OSError(98, "Address already in use")))
    metrics server cannot listen on 127.0.0.1:9108 (metrics.host, metrics.port): [Errno 98] Address already in use; another process (a second streamer?) may hold the port: set metrics.port: 0 for any free port, or another port
    >>> print(bind_error("nowhere.invalid", 9108, socket.gaierror(-2, "Name or service not known")))
    metrics server cannot listen on nowhere.invalid:9108 (metrics.host, metrics.port): [Errno -2] Name or service not known; metrics.host must be an address of this host (127.0.0.1, 0.0.0.0 for every interface)
    """
    hint = ("metrics.host must be an address of this host (127.0.0.1, 0.0.0.0 for every interface)"
            if isinstance(e, socket.gaierror) or getattr(e, "errno", None) == errno.EADDRNOTAVAIL else
            "another process (a second streamer?) may hold the port: set metrics.port: 0 for any free port, or another port")
    return ConfigError(f"metrics server cannot listen on {host}:{port} (metrics.host, metrics.port): {e}; {hint}")


class MetricsServer:
    """Serves ``/metrics`` and ``/healthz`` from a daemon thread; ``port=0`` picks a free port."""

    def __init__(self, metrics: StreamMetrics, host: str = "127.0.0.1", port: int = 9108, stale_s: float = 30.0,
                 request_timeout_s: float = 5.0):
        self.metrics, self.stale_s = metrics, stale_s
        handler = type("_Handler", (_QuietHandler,), {"timeout": request_timeout_s})
        try:
            self.server: WSGIServer = make_server(host, port, self._app, server_class=_ThreadingServer,
                                                  handler_class=handler)
        except (OSError, OverflowError) as e:  # port taken, host unknown or not local, port out of range: one line
            raise bind_error(host, port, e) from None
        self.host, self.port = host, self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, name="kdsm-metrics", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and close the listening socket; requests still in their threads are not waited for."""
        self.server.shutdown()
        self.server.server_close()

    def _app(self, environ, start_response):
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            age = time.time() - self.metrics.last_loop
            ok = age < self.stale_s
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "application/json")])
            return [(f'{{"status":"{"ok" if ok else "stale"}","last_loop_age_s":{age:.2f}}}').encode()]
        if path in ("/metrics", "/"):
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [self.metrics.render()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /healthz\n"]
