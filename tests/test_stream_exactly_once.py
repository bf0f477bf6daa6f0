"""Exactly-once alerts (``kafka.delivery: exactly_once``) against the real dev broker; nothing of Kafka mocked.

What a ``read_committed`` subscriber sees is judged by ``txn_reader.read_committed`` (Tansu 0.6.0 hands
records of aborted transactions to kafka-python's read_committed consumers; the reader applies the commit
and abort markers that Tansu does write, as Apache Kafka's broker does for such a consumer).

- SIGKILL the streamer three times mid-stream and restart it: every alert and dead letter exactly once;
- a second streamer joins and leaves while events flow: every alert exactly once;
- a stale instance whose transactional id a newer producer took is fenced: one log line, non-zero exit,
  nothing of it visible after the fence; its successor finishes exactly once; a fence between a batch's
  sends and its commit ends within ``kafka.delivery_timeout_s`` (Tansu drops the connection on that commit);
- a batch whose publish fails is aborted (nothing visible, offsets not committed) and read again, from its first
  offset when nothing is committed yet, even with ``auto_offset_reset: latest``;
- a dead letter the broker refuses for its size is replaced by its fallback record when the batch is read again:
  one abort, the partition goes on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest
from conftest import make_blobs
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import MessageSizeTooLargeError
from kafka.future import Future
from stream_support import (
    Collect,
    StreamerThread,
    create_topics,
    event,
    kill_and_close,
    make_settings,
    produce,
    produce_paced,
    wait_for,
    write_stream_config,
)
from test_stream_crash import TopicReader, _start, _wait_log
from txn_reader import read_committed

from offline_train.detector import KDSM
from streamer.lifecycle.control import connect
from streamer.lifecycle.thresholds import ThresholdStore
from streamer.pipeline import app as app_module
from streamer.pipeline.checkpoint import (
    Fenced,
    InFlight,
    Send,
    TransactionAborted,
    TransactionalCheckpointer,
    Unresolved,
)
from streamer.pipeline.kafka_clients import make_consumer, make_transactional_producer

pytestmark = pytest.mark.integration


def _setup(tmp_path, kafka_bootstrap, redis_url, unique, model_dir, partitions=1, **stream):
    model = KDSM.load(model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(model_dir), **stream)
    s.kafka.delivery = "exactly_once"
    create_topics(s, partitions=partitions)
    # Every valid event alerts (warning threshold 0), so "every alert exactly once" is checkable per event id.
    ThresholdStore(connect(redis_url), s.redis.key_prefix).set(model.version_, "warning", 0.0, None, "test", 1.0)
    return model, s


def _config(tmp_path, s, transactional_id: str, name: str = "stream.yaml"):
    s = s.model_copy(deep=True)
    s.kafka.transactional_id = transactional_id
    return write_stream_config(s, tmp_path / name)


def _exactly_once(view, key) -> tuple[Counter, int]:
    counts = Counter(key(json.loads(r.value)) for r in view.records)
    return counts, sum(c - 1 for c in counts.values())


def _tail(*paths) -> str:
    return "\n".join(f"--- {p.name}\n" + p.read_text()[-3000:] for p in paths)


def _plain_read_committed(bootstrap, topic, partitions) -> int:
    """How many records kafka-python's own read_committed consumer returns (aborted ones included on Tansu)."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, isolation_level="read_committed")
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        n, quiet = 0, time.monotonic() + 2
        while time.monotonic() < quiet:
            got = sum(len(v) for v in c.poll(timeout_ms=200).values())
            n += got
            if got:
                quiet = time.monotonic() + 2
        return n
    finally:
        c.close()


def test_three_sigkills_every_alert_and_dead_letter_exactly_once(tmp_path, kafka_bootstrap, redis_url, unique, tiny_model_dir):
    model, s = _setup(tmp_path, kafka_bootstrap, redis_url, unique, tiny_model_dir, max_batch=100)
    cfg = _config(tmp_path, s, f"tx-{unique}")
    X = make_blobs(n=3600, seed=0)[0]
    values = [event(f"e{i}", x, model.feature_names_) if i % 50 else b"not json" for i, x in enumerate(X)]
    good = {f"e{i}" for i in range(len(values)) if i % 50}
    bad = {i for i in range(len(values)) if i % 50 == 0}
    progress = TopicReader(kafka_bootstrap, s.kafka.alerts_topic)  # read_uncommitted: progress only
    log_path = tmp_path / "stream.log"
    log = open(log_path, "ab")
    proc = _start(cfg, str(tiny_model_dir), log)
    assert _wait_log(log_path, '"event": "partitions_assigned"', 1), _tail(log_path)
    producer = threading.Thread(target=produce_paced, args=(s, values, 40))  # ~400 events/s: kills land mid-stream
    producer.start()
    kills = []
    try:
        for k in range(3):
            deadline = time.monotonic() + 60
            while len(progress.poll()) < 500 * (k + 1) and time.monotonic() < deadline:
                pass
            assert len(progress.values) >= 500 * (k + 1), _tail(log_path)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            kills.append(len(progress.values))
            proc = _start(cfg, str(tiny_model_dir), log)
            assert _wait_log(log_path, '"event": "started"', k + 2), _tail(log_path)
        assert kills[-1] < len(good), "the stream ended before the last kill; nothing was tested"
        producer.join(60)
        # Wait on the committed view, not the progress reader: records of the transaction the last kill left open
        # are in the uncommitted log, and the restarted instance must abort and re-read them before SIGTERM.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            view = read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1, timeout=10, idle=0.5)
            if len(_exactly_once(view, lambda a: a["event_id"])[0]) >= len(good):
                break
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0, _tail(log_path)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    alerts = read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1)
    dead = read_committed(kafka_bootstrap, s.kafka.deadletter_topic, 1)
    counts, dups = _exactly_once(alerts, lambda a: a["event_id"])
    dead_counts, dead_dups = _exactly_once(dead, lambda d: d["source"]["offset"])
    print(f"kills after {kills} alerts (uncommitted view); committed alerts {len(alerts.records)}, "
          f"aborted {alerts.aborted}, open {alerts.open}; uncommitted view {len(progress.values)}; "
          f"kafka-python read_committed on Tansu returns {_plain_read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1)}")
    assert set(counts) == good, f"missing {len(good - set(counts))}"
    assert dups == 0, counts.most_common(3)
    assert set(dead_counts) == bad and dead_dups == 0
    assert alerts.open == 0 and dead.open == 0
    # The group's committed offset covers every event: offsets went with the transactions.
    c = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=s.kafka.group_id, enable_auto_commit=False)
    assert c.committed(TopicPartition(s.kafka.events_topic, 0)) == len(values)
    c.close()
    assert "Traceback" not in log_path.read_text()


@pytest.mark.parametrize("fetch_process", [False, True], ids=["in-process", "fetch-process"])
def test_a_second_streamer_joins_and_leaves_every_alert_exactly_once(tmp_path, kafka_bootstrap, redis_url, unique,
                                                                     tiny_model_dir, fetch_process):
    n_events, parts = 12000, 4
    model, s = _setup(tmp_path, kafka_bootstrap, redis_url, unique, tiny_model_dir, partitions=parts, max_batch=200,
                      fetch_process=fetch_process)
    cfgs = [_config(tmp_path, s, f"tx-{unique}-{n}", f"stream-{n}.yaml") for n in "ab"]
    X = make_blobs(n=n_events, seed=1)[0]
    values = [event(f"e{i}", x, model.feature_names_) for i, x in enumerate(X)]
    logs = [tmp_path / f"stream-{n}.log" for n in "ab"]
    files = [open(p, "ab") for p in logs]
    from test_stream_rebalance import AlertReader

    progress = AlertReader(kafka_bootstrap, s.kafka.alerts_topic, parts)
    procs = []
    try:
        procs.append(_start(cfgs[0], str(tiny_model_dir), files[0]))
        assert _wait_log(logs[0], '"event": "partitions_assigned"', 1), _tail(*logs)
        producer = threading.Thread(target=produce_paced, args=(s, values, 200, 0.1))  # ~2000 events/s
        producer.start()

        def wait_seen(n, timeout=60):
            deadline = time.monotonic() + timeout
            while len(progress.poll()) < n and time.monotonic() < deadline:
                pass

        wait_seen(1500)
        procs.append(_start(cfgs[1], str(tiny_model_dir), files[1]))
        assert _wait_log(logs[1], '"event": "partitions_assigned"', 1), _tail(*logs)
        wait_seen(len(progress.values) + 2000)
        assert len(progress.values) < n_events, "the stream ended before the second streamer left; nothing was tested"
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(30) == 0, _tail(*logs)
        producer.join(60)
        wait_seen(n_events, timeout=90)
        procs[0].send_signal(signal.SIGTERM)
        assert procs[0].wait(30) == 0, _tail(*logs)
    finally:
        kill_and_close(procs, files)
    alerts = read_committed(kafka_bootstrap, s.kafka.alerts_topic, parts)
    counts, dups = _exactly_once(alerts, lambda a: a["event_id"])
    text = "".join(p.read_text() for p in logs)
    revocations = text.count('"event": "partitions_revoked"')
    print(f"{revocations} revocations; committed alerts {len(alerts.records)}, aborted {alerts.aborted}, "
          f"uncommitted view {len(progress.values)} ({len(progress.values) - n_events} beyond one per event)")
    assert revocations >= 2, "no rebalance happened"
    assert set(counts) == {f"e{i}" for i in range(n_events)}, f"missing {n_events - len(counts)}"
    assert dups == 0, counts.most_common(3)
    assert "Traceback" not in text and "User rebalance callback" not in text, _tail(*logs)


def test_a_stale_instance_is_fenced_and_produces_nothing_visible(tmp_path, kafka_bootstrap, redis_url, unique,
                                                                  tiny_model_dir):
    """A newer producer takes the transactional id mid-stream: the stale instance stops with one line and exit 1,
    nothing it did after the fence is visible, its successor finishes exactly once.

    The stop line is ``fenced``, or ``transaction_unresolved`` when the fence lands between a batch's sends and
    its commit: Tansu then drops the connection on the stale EndTxn instead of answering PRODUCER_FENCED, and
    kafka-python retries it until ``kafka.delivery_timeout_s`` (reproduced alone in the next test)."""
    model, s = _setup(tmp_path, kafka_bootstrap, redis_url, unique, tiny_model_dir, max_batch=50)
    s.kafka.delivery_timeout_s = 5.0  # bounds the unanswered-EndTxn path (and each client's close) for this test
    tid = f"tx-{unique}"
    cfg = _config(tmp_path, s, tid)
    X = make_blobs(n=20000, seed=2)[0]
    values = [event(f"e{i}", x, model.feature_names_) for i, x in enumerate(X)]
    progress = TopicReader(kafka_bootstrap, s.kafka.alerts_topic)
    logs = [tmp_path / "stale.log", tmp_path / "successor.log"]
    files = [open(p, "ab") for p in logs]
    procs = []
    stop_producing, sent = threading.Event(), []
    producer = threading.Thread(target=produce_paced, args=(s, values, 40), kwargs={"stop": stop_producing, "sent": sent})
    try:
        procs.append(_start(cfg, str(tiny_model_dir), files[0]))
        assert _wait_log(logs[0], '"event": "partitions_assigned"', 1), _tail(*logs)
        producer.start()  # ~400 events/s until stopped below, so the stale instance still has work after the fence
        deadline = time.monotonic() + 40
        while len(progress.poll()) < 300 and time.monotonic() < deadline:
            pass
        assert len(progress.values) >= 300, _tail(*logs)
        # A newer producer takes the transactional id (what a restarted or duplicate instance does first).
        usurper = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid)
        usurper.init_transactions()
        fenced_at = time.monotonic()
        try:
            code = procs[0].wait(40)  # fenced: about a second; unanswered EndTxn: 5 s, then each client's close
        except subprocess.TimeoutExpired:
            pytest.fail(f"the stale instance still runs 40 s after the fence\n{_tail(*logs)}")
        stopped_in = time.monotonic() - fenced_at
        stop_producing.set()
        usurper.close()
        assert code == 1, _tail(*logs)
        stale_log = logs[0].read_text()
        stops = [line for line in stale_log.splitlines() if '"event": "fenced"' in line
                 or '"event": "transaction_unresolved"' in line]
        assert len(stops) == 1 and "Traceback" not in stale_log, _tail(*logs)
        how = "fenced" if '"event": "fenced"' in stops[0] else "transaction_unresolved"
        if how == "fenced":
            assert f"kdsm stream: stopped: fenced: another producer with transactional id '{tid}'" in stale_log
        else:
            assert re.search(r"kdsm stream: stopped: the broker did not answer \w+ within 5 s", stale_log), stops
        # What the stale instance committed: its alerts exactly once, consistent with the group's offset.
        # An EndTxn left unanswered may still complete after the instance stopped, and its markers reach the alerts
        # partition and the group's offsets one at a time (as on Kafka): read both until they agree, 15 s at most.
        settle = time.monotonic() + 15
        while True:
            view = read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1)
            c = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=s.kafka.group_id, enable_auto_commit=False)
            committed = c.committed(TopicPartition(s.kafka.events_topic, 0)) or 0
            c.close()
            counts, dups = _exactly_once(view, lambda a: a["event_id"])
            if set(counts) == {f"e{i}" for i in range(committed)} or time.monotonic() > settle:
                break
            time.sleep(1)
        assert dups == 0 and set(counts) == {f"e{i}" for i in range(committed)}, (committed, len(counts))
        producer.join(60)
        n_events = sent[0]
        assert committed < n_events, "the stream ended before the fence; nothing was tested"
        # The successor (same id) finishes the stream: exactly once across the fence.
        procs.append(_start(cfg, str(tiny_model_dir), files[1]))
        deadline = time.monotonic() + 90
        while len({a["event_id"] for a in progress.poll()}) < n_events and time.monotonic() < deadline:
            pass
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(30) == 0, _tail(*logs)
    finally:
        stop_producing.set()
        kill_and_close(procs, files)
    view = read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1)
    counts, dups = _exactly_once(view, lambda a: a["event_id"])
    print(f"stale instance stopped ({how}) {stopped_in:.1f} s after the fence with {committed} of {n_events} events "
          f"committed; committed alerts {len(view.records)}, aborted {view.aborted}")
    assert set(counts) == {f"e{i}" for i in range(n_events)} and dups == 0


def test_a_fence_between_the_sends_and_the_commit_stops_within_the_delivery_timeout(kafka_bootstrap, redis_url,
                                                                                    unique):
    """The race the test above meets by chance, made certain: the batch's messages are acknowledged, then a newer
    producer takes the transactional id, then the batch commits. Apache Kafka answers the stale EndTxn with
    PRODUCER_FENCED (``Fenced``); Tansu 0.6.0 drops the connection instead (its log: ``ProducerFenced``) and
    kafka-python retries forever, so the checkpointer's bound ends it (``Unresolved``). Either way the call
    returns within ``kafka.delivery_timeout_s``, and nothing of the batch is visible."""
    s = make_settings(kafka_bootstrap, redis_url, unique)
    s.kafka.delivery, s.kafka.transactional_id, s.kafka.delivery_timeout_s = "exactly_once", f"tx-{unique}", 3.0
    create_topics(s)
    consumer = make_consumer(s.kafka, isolation_level="read_committed")
    producer = make_transactional_producer(s.kafka)
    cp = TransactionalCheckpointer(consumer, producer, delivery_timeout_s=s.kafka.delivery_timeout_s,
                                   transactional_id=s.kafka.transactional_id)
    batch = InFlight(offsets={}, scored=None, timestamps_ms=[])
    for i in range(5):
        cp.send(batch, s.kafka.alerts_topic, None, b"stale-%d" % i)
    producer.flush(timeout=10)
    assert all(x.ok() for x in batch.sends)
    usurper = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=s.kafka.transactional_id)
    usurper.init_transactions()
    started = time.monotonic()
    with pytest.raises((Fenced, Unresolved)) as stopped:
        cp.add(batch)
    took = time.monotonic() - started
    usurper.close()
    producer.close(timeout=1)
    consumer.close()
    print(f"stale commit ended as {type(stopped.value).__name__} after {took:.1f} s")
    assert took < s.kafka.delivery_timeout_s + 2
    assert read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1).records == []


def test_a_failed_publish_aborts_the_batch_and_it_is_read_again(kafka_bootstrap, redis_url, unique):
    """Step 5 of the exactly-once order on the real broker: real messages in a real transaction, one of the
    batch's sends refused (a failed future, as kafka-python reports a broker's nack): nothing of the batch
    is visible, the offsets stay, ``rewind`` puts the consumer back; the next try commits."""
    s = make_settings(kafka_bootstrap, redis_url, unique)
    s.kafka.delivery, s.kafka.transactional_id = "exactly_once", f"tx-{unique}"
    create_topics(s)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(10):
        p.send(s.kafka.events_topic, value=b"%d" % i)
    p.flush()
    p.close()
    consumer = make_consumer(s.kafka, isolation_level="read_committed")
    consumer.subscribe([s.kafka.events_topic])
    polled, deadline = [], time.monotonic() + 20
    while len(polled) < 10 and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=200).values():
            polled.extend(recs)
    assert len(polled) == 10
    tp = TopicPartition(s.kafka.events_topic, 0)
    producer = make_transactional_producer(s.kafka)
    cp = TransactionalCheckpointer(consumer, producer, transactional_id=s.kafka.transactional_id)
    cp.took({tp: 0})  # what the loop does with every batch it takes
    batch = InFlight(offsets={tp: 10}, scored=None, timestamps_ms=[])
    for i in range(3):
        cp.send(batch, s.kafka.alerts_topic, None, b"alert-%d" % i)
    batch.sends.append(Send(s.kafka.alerts_topic, None, b"refused", Future().failure(RuntimeError("nack"))))
    with pytest.raises(TransactionAborted):
        cp.add(batch)
    assert consumer.committed(tp) is None
    cp.rewind()
    assert consumer.position(tp) == 0  # no committed offset: the first offset taken
    retry = InFlight(offsets={tp: 10}, scored=None, timestamps_ms=[])
    cp.send(retry, s.kafka.alerts_topic, None, b"alert-retry")
    cp.add(retry)
    assert consumer.committed(tp) == 10 and cp.aborted_batches == 1
    producer.close()
    consumer.close(autocommit=False)
    view = read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1)
    assert [r.value for r in view.records] == [b"alert-retry"] and view.aborted == 3


def test_an_aborted_batch_is_read_again_under_latest_without_a_committed_offset(kafka_bootstrap, redis_url, unique):
    """``auto_offset_reset: latest``, nothing committed yet: the aborted batch is rewound to its first offset, not
    to the end of the log. Before the fix ``rewind`` sought the end: offsets 0-14 were never read again."""
    s = make_settings(kafka_bootstrap, redis_url, unique)
    s.kafka.delivery, s.kafka.transactional_id, s.kafka.auto_offset_reset = "exactly_once", f"tx-{unique}", "latest"
    create_topics(s)
    consumer = make_consumer(s.kafka, isolation_level="read_committed")
    consumer.subscribe([s.kafka.events_topic])
    tp = TopicPartition(s.kafka.events_topic, 0)
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(timeout_ms=200)
    assert consumer.position(tp) == 0  # latest, on an empty partition: from here on
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(10):
        p.send(s.kafka.events_topic, value=b"%d" % i)
    p.flush()
    polled = []
    while len(polled) < 10 and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=200).values():
            polled.extend(recs)
    assert [r.offset for r in polled] == list(range(10))
    producer = make_transactional_producer(s.kafka)
    cp = TransactionalCheckpointer(consumer, producer, transactional_id=s.kafka.transactional_id)
    cp.took({tp: polled[0].offset})
    batch = InFlight(offsets={tp: 10}, scored=None, timestamps_ms=[])
    cp.send(batch, s.kafka.alerts_topic, None, b"alert-0")
    batch.sends.append(Send(s.kafka.alerts_topic, None, b"refused", Future().failure(RuntimeError("nack"))))
    with pytest.raises(TransactionAborted):
        cp.add(batch)
    for i in range(10, 15):  # more events arrive meanwhile
        p.send(s.kafka.events_topic, value=b"%d" % i)
    p.flush()
    p.close()
    cp.rewind()
    again = []
    while len(again) < 15 and time.monotonic() < deadline + 10:
        again.extend(r.offset for recs in consumer.poll(timeout_ms=200).values() for r in recs)
    producer.close()
    consumer.close(autocommit=False)
    assert again == list(range(15))


class SmallTopicProducer:
    """The real transactional producer, except for one topic with a small ``max.message.bytes``: a record over
    ``limit`` bytes is refused by "the broker" when the producer is flushed (``MessageSizeTooLargeError``, what Apache
    Kafka answers). Tansu ignores ``max.message.bytes``, so the refusal is played here: the record is held back and
    its future failed once the real flush returns. Everything else (the transaction, its other records, the
    offsets, commit and abort) is the real producer's on the real broker."""

    def __init__(self, real, topic: str, limit: int):
        self._real, self._topic, self._limit = real, topic, limit
        self._held: list[Future] = []
        self.refused: list[int] = []  # the size of each record refused

    def __getattr__(self, name):
        return getattr(self._real, name)

    def send(self, topic, key=None, value=None, headers=None, **kw):
        if topic == self._topic and value is not None and len(value) > self._limit:
            self.refused.append(len(value))
            future = Future()
            self._held.append(future)
            return future
        return self._real.send(topic, key=key, value=value, headers=headers, **kw)

    def flush(self, timeout=None):
        self._real.flush(timeout=timeout)
        held, self._held = self._held, []
        for future in held:
            future.failure(MessageSizeTooLargeError("MESSAGE_SIZE_TOO_LARGE: over the topic's max.message.bytes"))


def test_a_dead_letter_the_broker_refuses_is_replaced_by_its_fallback_and_the_partition_goes_on(
        kafka_bootstrap, redis_url, unique, tiny_model_dir, monkeypatch):
    """The real ``StreamApp`` on the real broker, exactly once; the dead-letter topic takes at most 3000 bytes a record
    (``SmallTopicProducer``) and three 10 KB events that are not valid make dead letters larger than that. Each
    batch holding one aborts once; read again, the refused dead letter goes as its fallback record at once, and the
    stream goes on: every valid event alerts once, each large event is one fallback dead letter, the group's offset
    covers every event. Before the fix every read of such a batch aborted: after 4, ``DeliveryError`` stopped the
    streamer, and a restart met the same batch (the partition stopped for good)."""
    model, s = _setup(None, kafka_bootstrap, redis_url, unique, tiny_model_dir, max_batch=50)
    s.kafka.transactional_id = f"tx-{unique}"
    X = make_blobs(n=300, seed=4)[0]
    large = {60, 61, 170}
    values = [b'{"id": "p%d", "blob": "%s"}' % (i, b"x" * 10000) if i in large else event(f"e{i}", x, model.feature_names_)
              for i, x in enumerate(X)]
    made = app_module.make_transactional_producer
    wrapped = []

    def make_small_topic_producer(k):
        wrapped.append(SmallTopicProducer(made(k), s.kafka.deadletter_topic, 3000))
        return wrapped[-1]

    monkeypatch.setattr(app_module, "make_transactional_producer", make_small_topic_producer)
    sink = Collect()
    produce(s, values)
    valid = {f"e{i}" for i in range(len(values)) if i not in large}
    st = StreamerThread(s, sinks=[sink]).start()
    try:
        assert wait_for(lambda: sink.distinct() >= len(valid) or st.error, timeout=90), sink.distinct()
    finally:
        st.stop()  # raises what stopped the streamer (before the fix: DeliveryError)
    cp = st.app.checkpoint
    assert 1 <= cp.aborted_batches <= len(large) and cp._aborts_in_a_row == 0 and cp.refused == {}
    assert len(wrapped[0].refused) == len(large)  # each refused once: read again, its fallback went at once
    assert set(sink.ids()) == valid
    alerts = read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1)
    counts, dups = _exactly_once(alerts, lambda a: a["event_id"])
    assert set(counts) == valid and dups == 0
    dead = [json.loads(r.value) for r in read_committed(kafka_bootstrap, s.kafka.deadletter_topic, 1).records]
    assert sorted(d["source"]["offset"] for d in dead) == sorted(large)
    for d in dead:
        assert "MessageSizeTooLargeError" in d["publish_fallback"]["error"], d
        assert "payload" in d["publish_fallback"]["left_out"] and d["payload_bytes"] > 10000
    c = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=s.kafka.group_id, enable_auto_commit=False)
    assert c.committed(TopicPartition(s.kafka.events_topic, 0)) == len(values)
    c.close()


def test_tansu_quirk_read_committed_returns_aborted_records(kafka_bootstrap, unique):
    """The minimal reproduction of the Tansu quirk the reader above works around (README, Tansu quirks).

    One aborted and one committed transaction; kafka-python's read_committed consumer gets both records
    from Tansu 0.6.0 (its Fetch response lists no aborted transactions), the marker-aware reader only the
    committed one. If this fails because Tansu got it right, the workaround can go."""
    topic = f"quirk-{unique}"
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"quirk-{unique}")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, value=b"aborted")
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    p.send(topic, value=b"committed")
    p.commit_transaction()
    p.close()
    c = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None, isolation_level="read_committed")
    c.assign([TopicPartition(topic, 0)])
    c.seek_to_beginning()
    got, deadline = [], time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got.extend(r.value for r in recs)
    c.close()
    assert got == [b"aborted", b"committed"]  # Apache Kafka would return [b"committed"]
    view = read_committed(kafka_bootstrap, topic, 1)
    assert [r.value for r in view.records] == [b"committed"] and view.aborted == 1
