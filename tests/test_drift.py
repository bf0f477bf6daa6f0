"""Drift sink: detectors, alert rate, hysteresis, cooldown, publication to Redis and Kafka."""

from __future__ import annotations

import json

import numpy as np
import pytest

from offline_train.detector import KDSM
from streamer.lifecycle.archive import example_batch
from streamer.lifecycle.config import DriftConfig
from streamer.lifecycle.control import Keys
from streamer.lifecycle.drift import DriftSink, model_alert_rate
from streamer.lifecycle.metrics import LifecycleMetrics

RNG_BASE = np.random.default_rng(123).gamma(2.0, 1.0, 200_000)
THRESHOLD = float(np.quantile(RNG_BASE, 0.99))  # calibrated alert rate 1 %


def feed(sink, scores, batch=200, version="v1"):
    events = []
    for i in range(0, len(scores), batch):
        s = scores[i:i + batch]
        b = example_batch(len(s), version=version)
        b.scores, b.severities, b.thresholds = s, np.where(s >= THRESHOLD, "warning", ""), {"warning": THRESHOLD}
        e = sink.on_committed(b)
        if e is not None:
            events.append((i, e))
    return events


def cfg(**kw):
    return DriftConfig(**{"calibrated_alert_rate": 0.01, **kw})


@pytest.mark.parametrize("detector", ["adwin", "kswin", "page_hinkley"])
def test_stationary_stream_gives_no_drift(detector):
    scores = np.random.default_rng(7).gamma(2.0, 1.0, 6000 if detector == "kswin" else 20000)
    assert feed(DriftSink(cfg(detector=detector, cooldown_s=0)), scores) == []


def test_step_shift_gives_one_event_then_cooldown():
    rng = np.random.default_rng(1)
    scores = np.concatenate([rng.gamma(2, 1, 5000), rng.gamma(2, 1, 10000) * 1.5])
    events = feed(DriftSink(cfg()), scores)
    assert len(events) == 1  # cooldown: one shift, one event
    at, e = events[0]
    assert 5000 < at < 5000 + 2500
    st = e["statistics"]
    assert e["detector"] == "adwin" and e["model_version"] == "v1"
    assert st["alert_rate"] > 2 * st["calibrated_alert_rate"] and st["alert_rate_z"] > 4


def test_short_burst_is_not_drift():
    rng = np.random.default_rng(2)
    scores = np.concatenate([rng.gamma(2, 1, 5000), rng.gamma(2, 1, 200) * 3, rng.gamma(2, 1, 5000)])
    assert feed(DriftSink(cfg(cooldown_s=0)), scores) == []


@pytest.mark.parametrize("detector", ["adwin", "page_hinkley"])
def test_subtle_shift_found_by_detector_alone(detector):
    rng = np.random.default_rng(3)
    scores = np.concatenate([rng.gamma(2, 1, 5000), rng.gamma(2, 1, 5000) * 1.25])
    events = feed(DriftSink(cfg(detector=detector, alert_rate_z=1e9)), scores)
    assert len(events) == 1
    st = events[0][1]["statistics"]
    assert st["signal"] == "detector" and st["after_mean"] > st["before_mean"] and st["persist_z"] > 4


def test_model_swap_resets_the_watch():
    rng = np.random.default_rng(4)
    sink = DriftSink(cfg())
    assert feed(sink, rng.gamma(2, 1, 3000)) == []
    # The same shifted scores under a new version: counted from zero, so still in warm-up and no event.
    assert feed(sink, rng.gamma(2, 1, 400) * 1.5, version="v2") == []
    assert sink.version == "v2" and sink.n == 400


def test_calibrated_rate_from_the_model(tiny_model_dir):
    det = KDSM.load(tiny_model_dir, device="cpu")
    assert model_alert_rate(det, None) == pytest.approx(1 - det.calibration_.quantiles["warning"], abs=0.01)
    # An ops override to a lower threshold raises the expected rate.
    assert model_alert_rate(det, {"warning": det.thresholds_["warning"] * 0.5}) > model_alert_rate(det, None)


@pytest.mark.integration
@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
def test_publish_to_redis_and_kafka_with_fleet_cooldown(redis_client, kafka_bootstrap, unique, background):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import TopicPartition

    topic = f"drift-{unique}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    keys = Keys(f"t{unique}:")
    metrics = LifecycleMetrics()  # both streamers count into one object here, as on one /metrics
    rng = np.random.default_rng(5)
    shifted = np.concatenate([rng.gamma(2, 1, 4000), rng.gamma(2, 1, 4000) * 1.6])
    # Two streamers see the same shift: one event, one retrain request for the fleet.
    sinks = [DriftSink(cfg(kafka_topic=topic), redis=redis_client, keys=keys, producer=producer, instance=f"s{i}",
                       metrics=metrics, background=background)
             for i in range(2)]
    for s in sinks:
        feed(s, shifted)
        s.flush()
    assert sorted(len(s.events) for s in sinks) == [0, 1]
    drift = redis_client.xrange(keys.drift)
    requests = redis_client.xrange(keys.requests)
    assert len(drift) == 1 and len(requests) == 1
    event = json.loads(drift[0][1]["event"])
    assert event["model_version"] == "v1" and requests[0][1]["reason"] == "drift"
    assert requests[0][1]["drift_id"] == event["id"]
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    consumer.assign([TopicPartition(topic, 0)])  # no group: no join wait
    got = [json.loads(m.value) for m in consumer]
    consumer.close()
    producer.close()
    assert [g["id"] for g in got] == [event["id"]]
    assert metrics.value("kdsm_drift_events_total", detector="adwin", signal="alert_rate") == 1
    assert metrics.value("kdsm_drift_suppressed_total", scope="fleet") >= 1


def test_a_redis_that_does_not_answer_never_holds_the_scoring_thread():
    """The sink runs on the scoring thread; its cooldown key and its publication waited out the control plane's
    timeout for each command there (6 s a confirmation, against a Redis that takes connections and does not answer).
    A streamer's sink (``background``) hands the event to its own thread; close() still publishes what it was given."""
    import time

    server, silent = _silent_redis(command_timeout_s=1.0)
    metrics = LifecycleMetrics()
    sink = DriftSink(DriftConfig(warmup_events=0, persist_events=10, calibrated_alert_rate=0.01, alert_rate_window=50),
                     redis=silent, keys=Keys("kdsm:"), metrics=metrics, background=True)
    b = example_batch(60)
    b.severities = np.array(["warning"] * 60)
    t = time.monotonic()
    assert sink.on_committed(b)["statistics"]["signal"] == "alert_rate"
    assert time.monotonic() - t < 0.5
    sink.close()  # the cooldown key's timeout (Redis down: the local cooldown only), then the publication's
    assert [e["statistics"]["signal"] for e in sink.events] == ["alert_rate"]
    assert metrics.value("kdsm_drift_publish_errors_total", target="redis") == 1
    server.close()


def test_a_background_sink_holds_a_bounded_backlog_and_its_close_a_bounded_wait():
    """With no cooldown and a Redis that does not answer, every confirmation was queued (no bound) and close() published
    them all first: 200 queued, 278 s to stop. Now a backlog of 8; beyond it, confirmations count as suppressed."""
    import time

    server, silent = _silent_redis(command_timeout_s=0.5)
    metrics = LifecycleMetrics()
    sink = DriftSink(DriftConfig(warmup_events=0, persist_events=10, calibrated_alert_rate=0.01, alert_rate_window=50,
                                 cooldown_s=0), redis=silent, keys=Keys("kdsm:"), metrics=metrics, background=True)
    for k in range(40):
        b = example_batch(60, offset0=60 * k)
        b.severities = np.array(["warning"] * 60)
        sink.on_committed(b)
    assert metrics.value("kdsm_drift_suppressed_total", scope="backlog") >= 40 - 8 - 2
    t = time.monotonic()
    sink.close(timeout_s=1.0)
    assert time.monotonic() - t < 3.0
    # Abandoned: the thread publishes nothing more (it went on, and built producers nothing closed)
    published = metrics.value("kdsm_drift_events_total", detector="adwin", signal="alert_rate")
    time.sleep(3.0)
    assert metrics.value("kdsm_drift_events_total", detector="adwin", signal="alert_rate") <= published + 1
    server.close()


def _silent_redis(command_timeout_s: float):
    """A server that takes connections and never answers (a paused or partitioned Redis), and a client of it."""
    import socket
    import threading

    from streamer.config import RedisConfig
    from streamer.lifecycle.control import redis_client

    server, held = socket.socket(), []

    def accept():
        try:
            while True:
                held.append(server.accept())
        except OSError:  # closed by the test
            pass

    server.bind(("127.0.0.1", 0))
    server.listen(64)
    threading.Thread(target=accept, daemon=True).start()
    url = f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    return server, redis_client(RedisConfig(url=url, command_timeout_s=command_timeout_s))
