"""End to end against the real broker and Redis: planted anomalies alert, malformed events dead-letter, sinks see committed batches."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest
from conftest import make_blobs
from prometheus_client.parser import text_string_to_metric_families
from stream_support import (
    Collect,
    StreamerThread,
    create_topics,
    event,
    make_settings,
    malformed_corpus,
    produce,
    read_topic,
    wait_for,
)

from offline_train.detector import KDSM
from streamer.pipeline.alerts import alert_id

pytestmark = pytest.mark.integration

class Boom:
    def on_committed(self, batch):
        raise RuntimeError("sink failure")


ALERT_FIELDS = {"alert_id", "event_id", "event_time", "scored_at", "score", "p_value", "severity", "threshold",
                "model_version", "schema_hash", "source", "top_features"}


@pytest.mark.parametrize("fetch_process", [False, True], ids=["in-process", "fetch-process"])
def test_planted_anomalies_alert_and_malformed_events_dead_letter(kafka_bootstrap, redis_url, unique, tiny_model_dir,
                                                                 fetch_process):
    det = KDSM.load(tiny_model_dir, device="cpu")
    names = det.feature_names_
    X = make_blobs(n=1600, seed=0)[0][1200:]  # the training distribution, rows the model did not see
    _, planted = make_blobs(n=10, n_out=20, seed=8)
    corpus = malformed_corpus(names, 65536)
    # Interleave: normal rows, a planted anomaly every 20 rows, a malformed event every 11 rows.
    values, kinds, valid_ids, planted_ids = [], [], [], []
    pi, ci = 0, 0
    for i, x in enumerate(X):
        values.append(event(f"n{i}", x, names, ts=1700000000 + i))
        valid_ids.append(f"n{i}")
        if i % 20 == 0 and pi < len(planted):
            values.append(event(f"p{pi}", planted[pi], names, ts=1700000000 + i))
            valid_ids.append(f"p{pi}")
            planted_ids.append(f"p{pi}")
            pi += 1
        if i % 11 == 0 and ci < len(corpus):
            kinds.append(corpus[ci])
            values.append(corpus[ci][1])
            ci += 1
    assert ci == len(corpus) and len(corpus) >= 20

    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=64,
                      fetch_process=fetch_process)
    create_topics(s)
    sink = Collect()
    st = StreamerThread(s, sinks=[Boom(), sink]).start()  # a failing sink must not stop the others or the stream
    try:
        produce(s, values)
        assert wait_for(lambda: len(sink.ids()) >= len(valid_ids), timeout=30), "not every valid event was committed"
        metrics = urllib.request.urlopen(st.server.url + "/metrics", timeout=5).read().decode()
        health = urllib.request.urlopen(st.server.url + "/healthz", timeout=5)
        assert health.status == 200
    finally:
        st.stop()

    # Every valid event was scored exactly once (no restart here), in a committed batch.
    assert sorted(sink.ids()) == sorted(valid_ids)
    dead = [json.loads(r.value) for r in read_topic(kafka_bootstrap, s.kafka.deadletter_topic, len(corpus))]
    assert [d["reason"] for d in dead] == [r for _, _, r in kinds]
    for d, (_, raw, _) in zip(dead, kinds, strict=True):
        assert d["source"]["topic"] == s.kafka.events_topic and d["message"]
        if raw:
            got = d["payload"].encode() if d["payload_encoding"] == "utf-8" else __import__("base64").b64decode(d["payload"])
            assert got == raw  # the original bytes survive
    # Alerts: every planted anomaly above the warning threshold, with every documented field.
    alerts = {a["event_id"]: a for a in (json.loads(r.value) for r in read_topic(kafka_bootstrap, s.kafka.alerts_topic, len(planted_ids)))}
    warn = det.thresholds_["warning"]
    planted_scores = det.decision_function(planted)
    expect = [pid for pid, sc in zip(planted_ids, planted_scores, strict=True) if sc >= warn]
    assert len(expect) >= 0.8 * len(planted_ids)
    assert set(expect) <= set(alerts)
    for pid in expect:
        a = alerts[pid]
        assert set(a) == ALERT_FIELDS | {"score_parts", "leading_part", "explained_by"}  # the default's three parts
        assert a["leading_part"] in a["score_parts"] and a["explained_by"] == "network"
        assert a["severity"] in ("warning", "critical") and a["score"] >= a["threshold"]
        parts = det.score_parts(planted[[planted_ids.index(pid)]])
        assert a["score_parts"] == pytest.approx(
            {"network": parts.network[0], "isolation": parts.forest[0], "knn": parts.knn[0]}, rel=1e-5)
        assert a["model_version"] == det.version_ and a["schema_hash"] == det.schema_hash_
        assert a["alert_id"] == alert_id(a["source"]["topic"], a["source"]["partition"], a["source"]["offset"], det.version_)
        assert 0 < a["p_value"] <= 1 and isinstance(a["event_time"], int)
        assert len(a["top_features"]) == 5
        tf = a["top_features"][0]
        assert set(tf) == {"name", "value", "expected", "contribution", "direction"} and tf["name"] in names
        assert np.isclose(a["score"], planted_scores[planted_ids.index(pid)], rtol=1e-5)
    normal_alerts = [k for k in alerts if k.startswith("n")]
    assert len(normal_alerts) <= 0.05 * len(X)
    # Metrics say the same.
    assert f'kdsm_dead_letters_total{{reason="invalid_json"}} {float(sum(r == "invalid_json" for *_, r in kinds))}' in metrics
    assert "kdsm_last_commit_timestamp_seconds" in metrics and "kdsm_scorer_device_info" in metrics
    # Every alert counted once more, by the part it was led by.
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    totals = {name: {tuple(x.labels.values()): x.value for x in families[name].samples if x.name.endswith("_total")}
              for name in ("kdsm_alerts", "kdsm_alerts_by_part")}
    by_part = {part: n for (part,), n in totals["kdsm_alerts_by_part"].items()}
    assert sum(by_part.values()) == sum(totals["kdsm_alerts"].values()) > 0
    assert {a["leading_part"] for a in alerts.values()} <= set(by_part) <= {"network", "isolation", "knn"}
    assert f'kdsm_sink_errors_total{{sink="Boom"}} {float(len(sink.batches))}' in metrics


def test_backpressure_pauses_partitions_and_commits_everything(kafka_bootstrap, redis_url, unique, tiny_model_dir):
    """With max_in_flight=1 and slow acks (linger 200 ms), every batch waits paused for its acks (each batch holds
    far outliers, so each has alerts to acknowledge, whatever the model's thresholds)."""
    det = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=50, max_in_flight=1)
    s.kafka.linger_ms = 200
    create_topics(s)
    inliers, outliers = make_blobs(n=1500, seed=0)
    X = inliers[1200:].copy()
    X[::10] = outliers[: len(X[::10])]  # one event in ten is far out: every batch of up to 50 alerts
    values = [event(f"e{i}", x, det.feature_names_) for i, x in enumerate(X)] + [b"oops"]
    sink = Collect()
    st = StreamerThread(s, sinks=[sink]).start()
    try:
        produce(s, values)
        assert wait_for(lambda: len(sink.ids()) >= len(X), timeout=30)
        paused = st.app.metrics.registry.get_sample_value("kdsm_backpressure_pauses_total")
    finally:
        st.stop()
    assert sorted(sink.ids()) == sorted(f"e{i}" for i in range(len(X)))
    assert paused >= 3
    assert not st.app.checkpoint.in_flight  # nothing left unacknowledged after shutdown


def test_constant_scorer_runs_the_same_loop_and_reports_alert_acks(kafka_bootstrap, redis_url, unique, tiny_model_dir):
    """--scorer none: the real loop (decode, dead letters, alert encoding, acks, commits) with scoring excluded;
    every 10th valid row of a batch alerts at the lowest threshold; each alert's broker ack reaches the hook and
    kdsm_alert_latency_seconds."""
    import threading

    from prometheus_client import generate_latest

    from streamer.pipeline.app import StreamApp
    from streamer.pipeline.provider import StaticModelProvider
    from streamer.pipeline.scorer import ConstantScorer

    det = KDSM.load(tiny_model_dir, device="cpu")
    names = det.feature_names_
    X = make_blobs(n=400, seed=3)[0][:300]
    corpus = malformed_corpus(names, 65536)[:5]
    values = [event(f"c{i}", x, names, ts=1700000000 + i) for i, x in enumerate(X)]
    for j, (_, raw, _) in enumerate(corpus):
        values.insert(7 + 50 * j, raw)
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=64)
    s.metrics.enabled = False
    create_topics(s)
    sink, acks = Collect(), []
    app = StreamApp(s, StaticModelProvider(str(tiny_model_dir), "cpu"), sinks=[sink], scorer=ConstantScorer(0.1, 3),
                    on_alert_acked=lambda ts_ms, at: acks.append((ts_ms, at)))
    th = threading.Thread(target=app.run, kwargs={"max_events": len(values)}, daemon=True)
    th.start()
    assert app.ready.wait(20)
    produce(s, values)
    th.join(60)
    assert not th.is_alive()
    assert sorted(sink.ids()) == sorted(f"c{i}" for i in range(len(X)))
    low_sev, low = min(det.thresholds_.items(), key=lambda kv: kv[1])
    expect = sorted(i for b in sink.batches for i in b.event_ids[::10])
    alerts = [json.loads(r.value) for r in read_topic(kafka_bootstrap, s.kafka.alerts_topic, len(expect))]
    assert sorted(a["event_id"] for a in alerts) == expect and app.counts["alerts"] == len(expect)
    for a in alerts:
        assert set(a) == ALERT_FIELDS and a["severity"] == low_sev and a["score"] == pytest.approx(low)
        assert len(a["top_features"]) == 3
    dead = [json.loads(r.value)["reason"] for r in read_topic(kafka_bootstrap, s.kafka.deadletter_topic, len(corpus))]
    assert dead == [r for _, _, r in corpus]
    # One ack per alert, after its event was produced; the histogram counted them.
    assert len(acks) == len(expect) and all(ts > 0 and at >= ts / 1000.0 for ts, at in acks)
    text = generate_latest(app.metrics.registry).decode()
    assert f"kdsm_alert_latency_seconds_count {float(len(expect))}" in text
