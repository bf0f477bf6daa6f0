"""/metrics serves the streamer's own metrics and the lifecycle modules' counters; /healthz tracks the loop."""

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from offline_train.config import ConfigError
from streamer.dev.local_services import free_port
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


def test_a_port_already_taken_is_one_config_error_naming_the_setting():
    """A second streamer on the host (default port 9108) died in the metrics server's bind with an OSError traceback."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError) as e:
            MetricsServer(StreamMetrics(), "127.0.0.1", port)
    msg = str(e.value)
    assert msg.startswith(f"metrics server cannot listen on 127.0.0.1:{port} (metrics.host, metrics.port): ")
    assert "set metrics.port: 0 for any free port" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match=r"nowhere\.invalid:0 .*metrics\.host must be an address of this host"):
        MetricsServer(StreamMetrics(), "nowhere.invalid", 0)


def test_kdsm_stream_on_a_taken_metrics_port_says_so_in_one_line(tiny_model_dir, tmp_path):
    """End to end: `kdsm stream` exits 2 with one line on stderr, before reaching Kafka or Redis, no traceback."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith("KDSM_") and "__" in k)}
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env.update(KDSM_METRICS__PORT=str(port), KDSM_KAFKA__BOOTSTRAP=f"127.0.0.1:{free_port()}",
                   KDSM_REDIS__URL=f"redis://127.0.0.1:{free_port()}/0")
        r = subprocess.run([sys.executable, "-m", "streamer", "stream", "--model", str(tiny_model_dir)],
                           capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1], timeout=120)
    err = [line for line in r.stderr.splitlines() if not line.startswith("{")]  # JSON log lines aside
    assert r.returncode == 2 and len(err) == 1, r.stderr
    assert err[0].startswith(f"kdsm stream: error: metrics server cannot listen on 127.0.0.1:{port} (metrics.host, "
                             "metrics.port): ") and "set metrics.port: 0 for any free port" in err[0]


def test_an_idle_connection_neither_freezes_healthz_nor_blocks_stop(capfd):
    """A client that connects and sends nothing (a TCP probe, a port scan) held wsgiref's one-threaded server: /healthz
    and /metrics went unanswered as long as it stayed, and stop() (the streamer's exit) waited for it for ever."""
    server = MetricsServer(StreamMetrics(), port=0, request_timeout_s=0.5).start()
    idle = socket.create_connection(("127.0.0.1", server.port))
    closed_by_server = socket.create_connection(("127.0.0.1", server.port))
    stopper = threading.Thread(target=server.stop, daemon=True)  # a stop() that hangs fails the test, not the run
    try:
        time.sleep(0.2)
        t0 = time.monotonic()
        assert _get(server.url + "/healthz")[0] == 200 and _get(server.url + "/metrics")[0] == 200
        assert time.monotonic() - t0 < 2
        closed_by_server.settimeout(5)
        assert closed_by_server.recv(1) == b""  # the server gave up on it after its request timeout
        t0 = time.monotonic()
        stopper.start()
        stopper.join(5)
        assert not stopper.is_alive() and time.monotonic() - t0 < 2, "stop() waits on the idle connection"
    finally:
        idle.close()
        closed_by_server.close()
        if not stopper.is_alive() and stopper.ident is None:
            stopper.start()
        stopper.join(5)
    assert "Traceback" not in capfd.readouterr().err  # a request that timed out is no error worth a traceback
