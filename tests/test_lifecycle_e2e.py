"""The model lifecycle end to end (real broker, real Redis): shift -> drift -> retrain on the archive -> gate ->
streamers swap -> alert rate back near the calibrated rate; rollback reaches running streamers; the archive
holds every committed event."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from conftest import make_blobs
from stream_support import (
    Collect,
    StreamerThread,
    create_topics,
    event,
    make_settings,
    produce,
    wait_for,
)

from offline_train.detector import KDSM
from streamer.lifecycle.archive import archive_schema, closed_files
from streamer.lifecycle.drift import model_alert_rate
from streamer.lifecycle.registry import ModelRegistry
from streamer.lifecycle.retrain import watch
from streamer.wiring import close_parts

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def shifted(X: np.ndarray) -> np.ndarray:
    X = X.copy()
    X[:, :5] = X[:, :5] * 1.5 + 1.0
    return X


def lifecycle_settings(kafka_bootstrap, redis_url, unique, tmp_path: Path):
    s = make_settings(kafka_bootstrap, redis_url, unique, model=None, max_batch=100)
    s.registry.enabled = True
    s.registry.store_dir = str(tmp_path / "store")
    s.registry.check_interval_s = 1.0
    s.archive.dir = str(tmp_path / "archive")
    s.archive.fsync = False
    s.archive.max_file_seconds = 0.5
    s.drift.warmup_events = 300
    s.drift.alert_rate_window = 300
    s.drift.hold_events = 200
    s.drift.persist_events = 400
    s.drift.kafka_topic = f"drift-{unique}"
    s.model.width, s.model.depth = 32, 1
    s.train.steps = 300
    s.retrain.window_hours = None
    # The new model's alert rate on fresh rows of its regime, over its calibrated rate, is a noisy ratio: the
    # threshold is an order statistic of the held-out 20% of the window, and the fresh rows are a finite sample.
    # With a 1200-row window and 1500 fresh rows it ranged over 0.4-4.1x across windows and seeds, beyond the 3x
    # this test allows (and the CI failed once at 3.6x). A 3500-row window (700 held out; fewer rows than the new
    # regime sends) scored on 3000 fresh rows gave 0.6-1.3x over this test's data in six orders of its rows.
    s.retrain.max_rows = 3500
    s.retrain.min_rows = 500
    s.retrain.gate_window_rows = 500
    s.retrain.request_delay_s = 2.0  # > archive.max_file_seconds: the shifted rows are in closed files
    return s


def rate_by_version(batches, version: str) -> tuple[float, int]:
    sev = np.concatenate([np.asarray(b.severities, dtype=object) for b in batches if b.model_version == version] or [np.zeros(0)])
    return (float(np.mean(sev != "")) if len(sev) else float("nan")), len(sev)


def test_shift_drift_retrain_swap_rollback(kafka_bootstrap, redis_url, unique, tiny_model_dir, tmp_path):
    s = lifecycle_settings(kafka_bootstrap, redis_url, unique, tmp_path)
    create_topics(s, partitions=2)
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tiny_model_dir)
    reg.promote(v0)
    old = KDSM.load(tiny_model_dir, device="cpu")
    names = old.feature_names_

    X = make_blobs(n=9500, seed=0)[0][1200:]  # the tiny model's distribution, rows it did not see
    phase_a, phase_b, phase_c, phase_d = X[:1000], shifted(X[1000:5000]), shifted(X[5000:8000]), shifted(X[8000:8300])
    n_sent = 0

    def send(rows, tag):
        nonlocal n_sent
        produce(s, [event(f"{tag}{i}", x, names) for i, x in enumerate(rows)])
        n_sent += len(rows)

    collect = Collect()
    # Two streamers in one group, one partition each, sharing Redis, the archive and the store.
    fleet = [StreamerThread(s, sinks=[collect]).start() for _ in range(2)]
    assert wait_for(lambda: all(len(st.app.consumer.assignment()) == 1 for st in fleet), timeout=30)
    stop = threading.Event()
    blocking = redis.Redis.from_url(redis_url, decode_responses=True)
    results = []
    watcher = threading.Thread(target=lambda: results.extend(watch(s, reg, blocking, stop=stop, max_runs=1)), daemon=True)
    providers = [st.app.provider for st in fleet]
    try:
        assert all(p.current().version_ == v0 for p in providers)
        send(phase_a, "a")
        # The old regime's rows in files of their own (closed after archive.max_file_seconds), so the retrain window,
        # the newest files up to retrain.max_rows, holds the new regime only: a window that mixed both regimes
        # would calibrate the new model on rows of both and alert more often on the new regime alone.
        assert wait_for(lambda: collect.distinct() >= n_sent, timeout=40)
        time.sleep(2 * s.archive.max_file_seconds)
        send(phase_b, "b")
        # Drift: one event in the Redis stream and on the Kafka topic, one retrain request.
        assert wait_for(lambda: reg.r.xlen(reg.keys.drift) >= 1, timeout=40), "no drift event"
        drift = json.loads(reg.r.xrange(reg.keys.drift)[0][1]["event"])
        assert drift["model_version"] == v0 and drift["statistics"]["alert_rate"] > 3 * drift["statistics"]["calibrated_alert_rate"]
        # The watcher starts once every row sent is in a closed archive file (its consumer group reads the request
        # stream from the start, so the drift's request waits for it): the window is then the new regime's files
        # whatever the machine's speed. Started at once, a slow machine's window could be filled up with the old
        # regime's rows, as above.
        assert wait_for(lambda: collect.distinct() >= n_sent, timeout=60)
        assert wait_for(lambda: sum(pq.ParquetFile(f).metadata.num_rows for f in closed_files(s.archive.dir)) >= n_sent,
                        timeout=30)
        watcher.start()
        # The watcher retrains on the archive, the gate passes, the new version is promoted.
        watcher.join(timeout=120)
        assert results and results[0].status == "promoted", results and results[0].to_dict()
        v1 = results[0].version
        gate = reg.get(v1)["gate"]
        window = reg.get(v1)["data_window"]
        assert gate["passed"] and window["usable_rows"] >= 500
        ids = pa.concat_tables([pq.read_table(f, columns=["id"]) for f in window["files"]]).column("id").to_pylist()
        assert ids and all(i.startswith("b") for i in ids), "the retrain window holds rows of the old regime"
        # Running streamers switch between batches.
        assert all(p.wait_for(v1, timeout=15) for p in providers), "a streamer did not swap"
        assert reg.r.xlen(reg.keys.drift) == 1  # one shift seen by two streamers: one event (fleet cooldown)
        send(phase_c, "c")
        assert wait_for(lambda: collect.distinct() >= n_sent, timeout=40)
        # Rollback reaches the running streamer too.
        reg.rollback(reason="test")
        assert all(p.wait_for(v0, timeout=15) for p in providers), "rollback not applied"
        send(phase_d, "d")
        assert wait_for(lambda: collect.distinct() >= n_sent, timeout=40)
    finally:
        stop.set()
        for st in fleet:
            st.stop()
            close_parts(*st.app.sinks, st.app.provider)
        blocking.close()

    new = KDSM.load(reg.store.local_path(v1), device="cpu")
    with collect.lock:
        batches = list(collect.batches)
    # The old model on the shifted stream vs the new one on the same regime.
    shifted_old = [b for b in batches if b.model_version == v0 and str(b.event_ids[0]).startswith("b")]
    rate_old, n_old = rate_by_version(shifted_old, v0)
    rate_new, n_new = rate_by_version(batches, v1)
    calibrated = model_alert_rate(new, None)
    print(f"alert rate: calibrated {calibrated:.4f}, old model on shifted data {rate_old:.4f} ({n_old} rows), "
          f"new model after the swap {rate_new:.4f} ({n_new} rows)")
    assert rate_old > 5 * calibrated
    assert rate_new <= 3 * calibrated
    # The loop takes the model after each poll, so every row sent after a swap was seen meets the new version:
    # all of phase C by v1, all of phase D by v0, and per partition the versions run v0... -> v1... -> v0...
    # A rebalance may redeliver uncommitted rows (at least once): judge each row by its first delivery.
    first: dict[tuple[int, int], tuple[str, str]] = {}
    for b in batches:  # in commit order
        for p, o, i in zip(b.partitions, b.offsets, b.event_ids, strict=True):
            first.setdefault((int(p), int(o)), (b.model_version, str(i)))
    print(f"rows delivered {sum(len(b.event_ids) for b in batches)}, distinct {len(first)}")
    assert sum(v == v1 for v, i in first.values() if i.startswith("c")) == len(phase_c)
    assert sum(v == v0 for v, i in first.values() if i.startswith("d")) == len(phase_d)
    for part in {p for p, _ in first}:
        seq = [first[k][0] for k in sorted(k for k in first if k[0] == part)]
        runs = [v for k, v in enumerate(seq) if k == 0 or seq[k - 1] != v]
        assert runs == [v0, v1, v0], runs
    # The archive: readable Parquet, expected schema, every committed event once (at least once).
    files = closed_files(s.archive.dir)
    table = pa.concat_tables([pq.read_table(f) for f in files])
    assert table.schema.equals(archive_schema(names))
    offsets = list(zip(table.column("kdsm_partition").to_pylist(), table.column("kdsm_offset").to_pylist(), strict=True))
    assert len(set(offsets)) == n_sent and len(offsets) >= n_sent
    versions: dict[str, set[str]] = {}
    for i, v in zip(table.column("id").to_pylist(), table.column("kdsm_model_version").to_pylist(), strict=True):
        versions.setdefault(i, set()).add(v)
    assert v0 in versions["a0"] and v1 in versions[f"c{len(phase_c) - 1}"]
