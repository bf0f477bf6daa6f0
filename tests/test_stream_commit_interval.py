"""``kafka.commit_interval_ms``: the acknowledged batches' offsets are committed at most once per interval, the sinks
see a batch only after its commit, and a shutdown commits everything (real broker and Redis, nothing mocked)."""

from __future__ import annotations

import threading

import pytest
from conftest import make_blobs
from kafka import KafkaConsumer, TopicPartition
from stream_support import (
    Collect,
    StreamerThread,
    create_topics,
    event,
    make_settings,
    produce,
    produce_paced,
    wait_for,
)

from offline_train.detector import KDSM

pytestmark = pytest.mark.integration


def committed_offset(s) -> int | None:
    c = KafkaConsumer(bootstrap_servers=s.kafka.bootstrap, group_id=s.kafka.group_id, enable_auto_commit=False)
    try:
        return c.committed(TopicPartition(s.kafka.events_topic, 0))
    finally:
        c.close()


def events(det, n: int, prefix: str) -> list[bytes]:
    X = make_blobs(n=n, seed=4)[0]
    return [event(f"{prefix}{i}", x, det.feature_names_) for i, x in enumerate(X)]


def test_nothing_is_committed_before_the_interval_and_everything_at_shutdown(kafka_bootstrap, redis_url, unique,
                                                                           tiny_model_dir):
    det = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=50)
    s.kafka.commit_interval_ms = 600_000  # longer than the test
    create_topics(s)
    values = events(det, 300, "w")
    sink = Collect()
    st = StreamerThread(s, sinks=[sink]).start()
    try:
        produce(s, values)
        assert wait_for(lambda: st.app.counts["events"] >= len(values), timeout=30)
        assert wait_for(lambda: not st.app.checkpoint.in_flight and st.app.checkpoint.acked, timeout=15)
        # Scored, published and acknowledged, yet not committed: the sinks have seen nothing and the group no offset.
        assert sink.ids() == [] and committed_offset(s) is None
    finally:
        st.stop()
    assert sorted(sink.ids()) == sorted(f"w{i}" for i in range(len(values)))
    assert committed_offset(s) == len(values)
    assert not st.app.checkpoint.in_flight and not st.app.checkpoint.acked


def test_a_short_interval_commits_several_batches_at_once(kafka_bootstrap, redis_url, unique, tiny_model_dir):
    det = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=20, max_wait_ms=20)
    s.kafka.commit_interval_ms = 700
    create_topics(s)
    values = events(det, 600, "s")
    sink = Collect()
    st = StreamerThread(s, sinks=[sink]).start()
    try:
        feeder = threading.Thread(target=produce_paced, args=(s, values, 40, 0.1))  # ~1.5 s of events
        feeder.start()
        feeder.join(60)
        # Committed within about one interval of the last event, without a shutdown.
        assert wait_for(lambda: sink.distinct() >= len(values), timeout=30)
        ok = st.app.metrics.registry.get_sample_value("kdsm_commits_total", {"outcome": "ok"})
        batches = st.app.counts["batches"]
    finally:
        st.stop()
    assert sorted(sink.ids()) == sorted(f"s{i}" for i in range(len(values)))
    assert committed_offset(s) == len(values)
    assert batches >= 15 and ok <= batches / 3  # one commit carried several batches
