"""SIGKILL the broker mid-stream and restart it (same port, same storage): the streamer reconnects by itself and no
event is lost. The broker is a durable Tansu (its log in the session's SeaweedFS), as ``start.sh --durable`` runs it."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from conftest import make_blobs
from stream_support import (
    create_topics,
    event,
    kill_and_close,
    make_settings,
    produce_paced,
    read_topic,
    write_stream_config,
)
from test_stream_crash import TopicReader, _start, _wait_log
from txn_reader import read_committed

from offline_train.detector import KDSM
from streamer.dev import local_services
from streamer.lifecycle.control import connect
from streamer.lifecycle.thresholds import ThresholdStore
from streamer.pipeline.checkpoint import Checkpointer
from streamer.pipeline.kafka_clients import make_producer

pytestmark = pytest.mark.integration
DOWN_S = 5.0  # how long the broker stays dead


@pytest.fixture
def durable_broker(s3_endpoint, tmp_path):
    svc = local_services.Service("kafka", local_services.free_port(), tmp_path / "broker", s3_endpoint=s3_endpoint)
    svc.start()
    yield svc
    svc.stop()


def test_broker_sigkill_and_restart_loses_nothing(tmp_path, durable_broker, redis_url, unique, tiny_model_dir):
    broker = durable_broker
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(broker.url, redis_url, unique, model=str(tiny_model_dir), max_batch=100, max_in_flight=2)
    # The durable Tansu answers an idempotent batch that was in flight at the kill, retried after the restart, as a
    # duplicate although it never stored it, and kafka-python counts that as delivered: the batch is lost
    # (docs/results/tansu-idempotence: 6 of 28 kills lost such a batch, 0 of 32 without idempotence). The
    # documented setting for this broker; it applies to this test's own event producer too.
    s.kafka.idempotent_producer = False
    create_topics(s)
    # Every valid event alerts (warning threshold 0), so "no event without its output" is checkable per id.
    ThresholdStore(connect(redis_url), s.redis.key_prefix).set(model.version_, "warning", 0.0, None, "test", 1.0)
    cfg = tmp_path / "stream.yaml"
    write_stream_config(s, cfg)
    X = make_blobs(n=3200, seed=0)[0][1200:]
    values = [event(f"e{i}", x, model.feature_names_) if i % 50 else b"not json" for i, x in enumerate(X)]
    n_bad = sum(1 for v in values if v == b"not json")

    # Events go out in acknowledged bursts (acks=all) under a lock; the broker is killed right after one large
    # burst, so the streamer has a backlog at the kill, and every event the test produced was acknowledged:
    # what the streamer had not yet read must survive the crash.
    burst_lock = threading.Lock()
    sent = {"next": 0}

    def send(p, n: int) -> None:  # call with burst_lock held
        i, j = sent["next"], min(sent["next"] + n, len(values))
        futures = [p.send(s.kafka.events_topic, key=f"k{k}".encode(), value=values[k]) for k in range(i, j)]
        p.flush()
        for f in futures:
            f.get(timeout=30)  # acknowledged, or the test fails here (not as a "lost" event later)
        sent["next"] = j

    def produce_in_bursts():
        p = make_producer(s.kafka, retries=50)
        while True:
            with burst_lock:
                if sent["next"] >= len(values):
                    break
                send(p, 40)
            time.sleep(0.1)
        p.close()

    log_path = tmp_path / "stream.log"
    log = open(log_path, "ab")
    proc = subprocess.Popen([sys.executable, "-m", "streamer", "stream", "--config", str(cfg), "--model",
                             str(tiny_model_dir)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    producer = threading.Thread(target=produce_in_bursts)
    try:
        assert _wait_log(log_path, '"event": "partitions_assigned"', 1), log_path.read_text()[-3000:]
        alerts = TopicReader(broker.url, s.kafka.alerts_topic)
        producer.start()
        deadline = time.monotonic() + 60
        while len(alerts.poll()) < 300 and time.monotonic() < deadline:
            pass
        assert len(alerts.values) >= 300, log_path.read_text()[-3000:]
        with burst_lock:
            p = make_producer(s.kafka)
            send(p, 1000)  # a backlog, acknowledged
            p.close()
            valid_sent = sum(1 for v in values[:sent["next"]] if v != b"not json")
            at_kill = len(alerts.poll())
            os.kill(broker.pid(), signal.SIGKILL)
            time.sleep(DOWN_S)  # the streamer's fetches, commits and alert sends fail meanwhile
            t0 = time.monotonic()
            broker.start()  # same port, same S3 storage
            restart_s = time.monotonic() - t0
        assert at_kill < valid_sent, "the streamer had no backlog at the kill; nothing was tested"
        assert at_kill < len(values) - n_bad, "the stream ended before the kill; nothing was tested"
        # The readers are the test's instruments, not the system under test: after the restart, the topics are
        # read afresh (a consumer's own reconnection is not what is tested here).
        alerts.c.close()
        want_alerts = {f"e{i}" for i in range(len(values)) if i % 50}
        want_dead = {i for i in range(len(values)) if i % 50 == 0}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            producer.join(0.5)
            got = read_topic(broker.url, s.kafka.alerts_topic, len(want_alerts), timeout=10)
            if len(got) >= len(want_alerts) and not {json.loads(r.value)["event_id"] for r in got} >= want_alerts:
                # Duplicates (a retried batch, written twice without idempotence) filled the count: read it all.
                got = read_topic(broker.url, s.kafka.alerts_topic, 10**9, timeout=10)
            if {json.loads(r.value)["event_id"] for r in got} >= want_alerts:
                break
        producer.join(60)
        assert proc.poll() is None, "the streamer exited instead of reconnecting:\n" + log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
    counts = Counter(json.loads(r.value)["event_id"] for r in got)
    missing = want_alerts - set(counts)
    assert not missing, f"{len(missing)} events without an alert, e.g. {sorted(missing)[:5]}\n" + log_path.read_text()[-3000:]
    dead_msgs = [json.loads(r.value) for r in read_topic(broker.url, s.kafka.deadletter_topic, len(want_dead), timeout=15)]
    if want_dead - {d["source"]["offset"] for d in dead_msgs}:  # duplicates may have filled the count: read it all
        dead_msgs = [json.loads(r.value) for r in read_topic(broker.url, s.kafka.deadletter_topic, 10**9, timeout=15)]
    lost_dead = want_dead - {d["source"]["offset"] for d in dead_msgs}
    assert not lost_dead, f"bad events without a dead letter: offsets {sorted(lost_dead)}; {len(dead_msgs)} read"
    dups = sum(c - 1 for c in counts.values())
    print(f"broker killed after {at_kill} of {valid_sent} sent valid events had alerts (backlog {valid_sent - at_kill}), "
          f"down {DOWN_S:g}s, restarted in {restart_s:.2f}s; duplicate alerts {dups}")


def test_producer_idempotence_follows_the_setting_and_transactions_force_it(kafka_bootstrap):
    from streamer.config import KafkaConfig
    from streamer.pipeline.kafka_clients import make_producer

    k = KafkaConfig(bootstrap=kafka_bootstrap)
    for setting in (True, False):
        p = make_producer(k.model_copy(update={"idempotent_producer": setting}))
        assert p.config["enable_idempotence"] is setting
        p.close()
    p = make_producer(k.model_copy(update={"idempotent_producer": False}), transactional_id=f"t-{time.time_ns()}")
    assert p.config["enable_idempotence"] is True
    p.close()


@pytest.fixture
def private_broker(tmp_path):
    """A broker of this test's own (in memory): SIGSTOP must not freeze the session's shared one."""
    svc = local_services.Service("kafka", local_services.free_port(), tmp_path / "broker")
    svc.start()
    yield svc
    os.kill(svc.pid(), signal.SIGCONT)  # a stopped process would not act on the SIGTERM that stops it
    svc.stop()


def test_a_record_the_broker_never_answers_fails_within_the_delivery_timeout(private_broker, redis_url, unique):
    """``make_producer`` bounds a record's life by ``kafka.delivery_timeout_s``: a record the checkpointer gives up
    on has failed in the producer too, so the copy it sends is never written beside a still-queued original.
    Before the fix the record stayed pending for kafka-python's own 120 s."""
    s = make_settings(private_broker.url, redis_url, unique)
    s.kafka.delivery_timeout_s = 2.0
    create_topics(s)
    producer = make_producer(s.kafka)
    producer.send(s.kafka.alerts_topic, value=b"warm-up").get(10)
    os.kill(private_broker.pid(), signal.SIGSTOP)
    try:
        future = producer.send(s.kafka.alerts_topic, value=b"never answered")
        deadline = time.monotonic() + 2 * s.kafka.delivery_timeout_s + 1
        while not future.is_done and time.monotonic() < deadline:
            time.sleep(0.1)
        assert future.is_done and future.failed(), "still pending in the producer after the delivery timeout"
    finally:
        os.kill(private_broker.pid(), signal.SIGCONT)
        producer.close(timeout=1)


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_a_broker_that_stops_answering_stops_the_streamer_in_bounded_time_and_the_restart_loses_nothing(
        tmp_path, private_broker, redis_url, unique, tiny_model_dir, delivery):
    """SIGSTOP the broker mid-stream: it keeps its sockets and answers nothing (a hung broker, not a dead one).
    The batch in flight is never acknowledged. At least once: its re-sends and fallbacks are refused too, so the
    streamer stops without committing (``delivery_stopped``). Exactly once: the batch's abort, or its offsets or
    commit, is never answered either; kafka-python alone would wait for that until its request timeout (30 s) and
    again in ``close``; the streamer waits ``kafka.delivery_timeout_s`` and stops (``transaction_unresolved``).
    Either way: one line, no traceback, exit 1, in bounded time. After SIGCONT the restarted instance delivers every
    alert: exactly once for a read_committed reader (its ``init_transactions`` settles the open transaction), or at
    least once."""
    broker = private_broker
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(broker.url, redis_url, unique, model=str(tiny_model_dir), max_batch=50)
    s.kafka.delivery, s.kafka.delivery_timeout_s = delivery, 2.0
    if delivery == "exactly_once":
        s.kafka.transactional_id = f"tx-{unique}"
    create_topics(s)
    ThresholdStore(connect(redis_url), s.redis.key_prefix).set(model.version_, "warning", 0.0, None, "test", 1.0)
    cfg = str(write_stream_config(s, tmp_path / "stream.yaml"))
    # A backlog: a batch is in flight most of the time. 5000 events leave ~4000 behind the first 1000 alerts, when the
    # broker is stopped; the restart works through them 50 at a time (20,000 took ~50 s of this test).
    X = make_blobs(n=5000, seed=3)[0]
    values = [event(f"e{i}", x, model.feature_names_) for i, x in enumerate(X)]
    produce_paced(s, values, 5000, 0)
    logs = [tmp_path / "hung.log", tmp_path / "restarted.log"]
    files = [open(p, "ab") for p in logs]
    procs = []
    try:
        procs.append(_start(cfg, str(tiny_model_dir), files[0]))
        assert _wait_log(logs[0], '"event": "partitions_assigned"', 1), logs[0].read_text()[-3000:]
        progress = TopicReader(broker.url, s.kafka.alerts_topic)
        deadline = time.monotonic() + 40
        while len(progress.poll()) < 1000 and time.monotonic() < deadline:
            time.sleep(0.05)  # leave the cores to the streamer
        progress.c.close()
        os.kill(broker.pid(), signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            code = procs[0].wait(90)
        finally:
            exited_in = time.monotonic() - stopped_at
            os.kill(broker.pid(), signal.SIGCONT)
        hung = logs[0].read_text()
        stop = "transaction_unresolved" if delivery == "exactly_once" else "delivery_stopped"
        assert code == 1, hung[-3000:]
        assert hung.count(f'"event": "{stop}"') == 1 and "Traceback" not in hung, hung[-3000:]
        assert "kdsm stream: stopped: " in hung, hung[-3000:]
        # Exactly once: the unacknowledged batch's flush, its unanswered abort, each client's close. At least once:
        # an unanswered offset commit, the batch's tries (resend_attempts + 2 flushes, with pauses of 3 s in all),
        # then the closes. Each wait is delivery_timeout_s; with the commit unbounded this test saw 55.7 s here.
        tries = inspect.signature(Checkpointer).parameters["resend_attempts"].default + 2
        bound = (5 if delivery == "exactly_once" else tries + 5) * s.kafka.delivery_timeout_s + 10
        assert exited_in < bound, (exited_in, hung[-3000:])
        procs.append(_start(cfg, str(tiny_model_dir), files[1]))
        want = {f"e{i}" for i in range(len(values))}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            view = read_committed(broker.url, s.kafka.alerts_topic, 1, timeout=10, idle=0.5)
            if {json.loads(r.value)["event_id"] for r in view.records} >= want:
                break
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(30) == 0, logs[1].read_text()[-3000:]
    finally:
        kill_and_close(procs, files)
    view = read_committed(broker.url, s.kafka.alerts_topic, 1)
    counts = Counter(json.loads(r.value)["event_id"] for r in view.records)
    assert set(counts) == want, len(want - set(counts))
    if delivery == "exactly_once":
        assert max(counts.values()) == 1, counts.most_common(3)
    print(f"hung broker, {delivery}: the streamer stopped {exited_in:.1f} s after SIGSTOP (delivery_timeout_s "
          f"{s.kafka.delivery_timeout_s:g}); after the restart {len(counts)} of {len(values)} alerts, "
          f"{sum(counts.values()) - len(counts)} duplicates, {view.aborted} aborted records left out")
