"""Wiring of one ``kdsm stream`` process: model provider, live thresholds, metrics server, consumer loop.

``run_stream`` is what the CLI calls; tests and the demo call it too (with
``signals=False`` off the main thread).
"""

from __future__ import annotations

import logging
import sys

from streamer.lifecycle.metrics import LifecycleMetrics
from streamer.lifecycle.thresholds import LiveThresholds
from streamer.pipeline.app import StreamApp
from streamer.pipeline.metrics import MetricsServer, StreamMetrics

from .wiring import close_parts, close_quietly, lifecycle_parts

log = logging.getLogger("kdsm.stream")


def configure_process(settings) -> None:
    """Process-wide settings of a stream process: torch's CPU threads (``stream.threads``) and the interpreter's
    switch interval (``stream.switch_interval_ms``).

    The scoring thread gives up the GIL around each torch call and must take it back from the main thread, which
    polls and decodes in Python; at Python's 5 ms a forward pass of many small calls waits for it again and again
    (docs/streaming.md, "The switch interval"). The process's entry point calls it (``kdsm stream``, ``kdsm bench
    stream``); library calls (tests, the demo's in-process streamer) leave the process alone.
    """
    sys.setswitchinterval(settings.stream.switch_interval_ms / 1000)
    if settings.stream.threads:
        import torch

        torch.set_num_threads(settings.stream.threads)


def build_app(settings, model_path=None, provider=None, sinks=()) -> tuple[StreamApp, MetricsServer | None]:
    """A ready-to-run ``StreamApp`` with its metrics server (started) and live thresholds (started)."""
    metrics = StreamMetrics()
    if provider is None:  # provider + archive/drift sinks from settings (streamer.wiring), counting on /metrics
        provider, extra = lifecycle_parts(settings, model_path, LifecycleMetrics(metrics.registry))
        sinks = [*sinks, *extra]
    server = None
    if settings.metrics.enabled:
        try:  # a port already taken is a ConfigError (one line, exit 2) naming metrics.host/metrics.port
            server = MetricsServer(metrics, settings.metrics.host, settings.metrics.port).start()
        except Exception:
            close_parts(*sinks, provider)
            raise
        log.info({"event": "metrics", "url": server.url + "/metrics", "health": server.url + "/healthz"})
    r = settings.redis
    live = LiveThresholds(r.url, r.password.get_secret_value() if r.password else None, r.key_prefix, r.refresh_s,
                          r.socket_timeout_s, metrics).start()
    return StreamApp(settings, provider, sinks=sinks, metrics=metrics, thresholds=live), server


def run_stream(settings, model_path=None, provider=None, sinks=(), max_events: int | None = None,
               signals: bool = False) -> dict:
    """Run the loop to its end; then stop the thresholds' watcher, close the sinks and the provider and stop the
    metrics server, each on its own (``close_failed`` is logged): the run's counts, or its error, are what comes out."""
    app, server = build_app(settings, model_path, provider, sinks)
    if signals:
        app.install_signal_handlers()
    try:
        return app.run(max_events=max_events)
    finally:
        close_quietly("LiveThresholds", app.thresholds.stop)
        close_parts(*app.sinks, app.provider)
        if server is not None:
            close_quietly("MetricsServer", server.stop)
