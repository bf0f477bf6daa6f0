"""/metrics serves the streamer's own metrics and the lifecycle modules' counters; /healthz tracks the loop."""

import time
import urllib.error
import urllib.request

from streamer.lifecycle.archive import ArchiveSink, example_batch
from streamer.lifecycle.config import ArchiveConfig
from streamer.lifecycle.metrics import LifecycleMetrics
from streamer.pipeline.metrics import MetricsServer, StreamMetrics


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_endpoint_includes_lifecycle_counters_and_health():
    m = StreamMetrics()
    m.alerts.labels("critical").inc(2)
    lm = LifecycleMetrics(m.registry)  # what streamer.service injects into the archive, drift and registry parts
    lm.drift_events.labels("adwin", "score").inc()
    lm.retrain_runs.labels("promoted").inc()
    server = MetricsServer(m, port=0, stale_s=0.5).start()
    try:
        status, body = _get(server.url + "/metrics")
        assert status == 200
        assert 'kdsm_alerts_total{severity="critical"} 2.0' in body
        assert 'kdsm_drift_events_total{detector="adwin",signal="score"}' in body
        assert 'kdsm_retrain_runs_total{outcome="promoted"}' in body
        assert "process_cpu_seconds_total" in body or "python_gc" in body
        m.last_loop = time.time()
        assert _get(server.url + "/healthz")[0] == 200
        m.last_loop = time.time() - 5
        assert _get(server.url + "/healthz")[0] == 503
    finally:
        server.stop()


def test_lifecycle_counters_are_injected_per_streamer(tmp_path):
    """Two streamers in one process (or two tests) count apart: no module-level counters."""
    a, b = LifecycleMetrics(StreamMetrics().registry), LifecycleMetrics(StreamMetrics().registry)
    sink = ArchiveSink(ArchiveConfig(dir=str(tmp_path), fsync=False), background=False, metrics=a)
    sink.on_committed(example_batch(7))
    sink.close()
    assert a.value("kdsm_archive_rows_total") == 7.0
    assert a.value("kdsm_archive_files_total", how="close") == 1.0
    assert b.value("kdsm_archive_rows_total") == 0.0
