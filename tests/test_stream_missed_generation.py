"""A streamer that misses a rebalance generation reads on from the group's committed offsets, not from its own.

kafka-python (eager protocol) keeps a partition's in-memory position when a
rebalance gives the partition back. If the member was late to rejoin, another
member can own the partition for a whole generation, process and commit past
that position, and leave; the late member then gets the partition back and,
left alone, would read the other member's events again. Here the streamer's
revocation is made slow (what a slow producer flush does) so a second group
member takes every partition, consumes and commits, and leaves.

The other way round: a partition the rebalance gives back with *no* committed offset, after the revocation could
not commit what the member had polled (its transaction aborted), is read again from the first offset the member
took, not from the position kafka-python kept.
"""

from __future__ import annotations

import threading
import time

import pytest
from conftest import make_blobs
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
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
from streamer.pipeline import app as app_module
from streamer.pipeline.batch import RecordBatch
from streamer.pipeline.checkpoint import Checkpointer, TransactionAborted
from streamer.pipeline.kafka_clients import make_consumer
from streamer.pipeline.metrics import StreamMetrics

pytestmark = pytest.mark.integration

PARTITIONS = 2


def test_a_streamer_that_missed_a_generation_does_not_reread_what_another_member_committed(
        kafka_bootstrap, redis_url, unique, tiny_model_dir, monkeypatch):
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=16)
    s.kafka.max_poll_interval_ms = 4000  # the rebalance timeout: the group stops waiting for a late member after it
    create_topics(s, partitions=PARTITIONS)
    X = make_blobs(n=300, seed=3)[0]

    def send(prefix, rows):
        produce(s, [event(f"{prefix}{i}", x, model.feature_names_) for i, x in enumerate(rows)],
                keys=[f"k{i}".encode() for i in range(len(rows))])

    slow, in_revocation, moved_on = threading.Event(), threading.Event(), threading.Event()
    original = app_module._Rebalance.on_partitions_revoked

    async def slow_revocation(self, revoked):
        await original(self, revoked)
        if slow.is_set() and revoked:
            in_revocation.set()
            while not moved_on.is_set():  # late to rejoin; the IO loop (heartbeats) runs on meanwhile
                await self.app.consumer._coordinator._net.sleep(0.05)

    monkeypatch.setattr(app_module._Rebalance, "on_partitions_revoked", slow_revocation)
    sink = Collect()
    streamer = StreamerThread(s, sinks=[sink]).start()
    other = None
    tps = [TopicPartition(s.kafka.events_topic, p) for p in range(PARTITIONS)]
    try:
        send("a", X[:100])
        assert wait_for(lambda: sink.distinct() == 100, 30), sink.distinct()
        slow.set()
        other = KafkaConsumer(s.kafka.events_topic, bootstrap_servers=kafka_bootstrap, group_id=s.kafka.group_id,
                              enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=1000)
        # The member keeps polling until it holds partitions; its deadline covers the whole sequence below,
        # which took over 30 s in a CI run on 2 loaded cores (the member had stopped polling by then).
        joining = threading.Thread(target=lambda: wait_for(lambda: other.poll(100) is not None and other.assignment(),
                                                           120))
        joining.start()
        assert in_revocation.wait(30), "the streamer was never asked to give its partitions up"
        # While the streamer is late, the group's offsets move past its positions (in production: another member
        # owned the partitions for a generation, processed these events and committed).
        send("b", X[100:200])
        reader = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=s.kafka.group_id, enable_auto_commit=False)
        reader.assign(tps)
        reader.seek_to_beginning()
        seen = []
        assert wait_for(lambda: seen.extend(r for rs in reader.poll(200).values() for r in rs) or len(seen) >= 200, 30)
        ends = {tp: reader.position(tp) for tp in tps}  # just past the "b" events
        # A transactional offset commit by group id alone (no member generation) is one the broker takes now.
        mover = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"mover-{unique}")
        mover.init_transactions()
        mover.begin_transaction()
        mover.send_offsets_to_transaction({tp: OffsetAndMetadata(off, "", -1) for tp, off in ends.items()},
                                          s.kafka.group_id)
        mover.commit_transaction()
        mover.close()
        moved = {tp: reader.committed(tp) for tp in tps}
        reader.close()
        assert moved == ends, f"the broker did not take the group's new offsets: {moved} != {ends}"
        slow.clear()
        moved_on.set()
        joining.join(120)
        assert other.assignment(), "the second member got no partition"
        other.close()  # the streamer gets every partition back
        other = None
        send("c", X[200:300])
        assert wait_for(lambda: sum(i.startswith("c") for i in set(sink.ids())) == 100, 60)
    finally:
        moved_on.set()
        if other is not None:
            other.close()
        streamer.stop()
    reread = sorted({i for i in sink.ids() if i.startswith("b")})
    assert reread == [], f"the streamer re-read {len(reread)} events the other member had committed"


class _AbortingApp:
    """What the listener touches of ``StreamApp``, with a real ``Checkpointer``: publishing what was polled aborts
    (``TransactionAborted``, as a failed ``commit_transaction`` in the revocation does)."""

    _closing, fetcher = False, None

    def __init__(self, consumer):
        self.consumer, self.metrics = consumer, StreamMetrics()
        self.checkpoint = Checkpointer(consumer, None)
        self.polled, self.aborted = [], 0

    def take(self, records):  # the loop's _prepare: the records are taken, to be scored
        self.checkpoint.took(RecordBatch.from_records(records).first_offsets())
        self.polled.extend(records)

    def _publish_pending(self):
        if self.polled:
            self.aborted += 1
            raise TransactionAborted("the revocation's transaction aborted")

    def _publish_gathered(self):
        pass

    def _drop_polled(self):
        self.polled = []

    def _after_commit(self, done):
        pass


def test_a_partition_given_back_without_a_committed_offset_after_an_aborted_revocation_is_read_again(
        kafka_bootstrap, redis_url, unique):
    """Exactly once, nothing committed yet: a second member joins, the revocation's transaction aborts, one partition
    comes back. Before the fix the member read on from the position kafka-python kept: offsets 0-9 of that
    partition were never scored, alerted or dead-lettered (it re-read nothing)."""
    s = make_settings(kafka_bootstrap, redis_url, unique)
    create_topics(s, partitions=PARTITIONS)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(20):
        p.send(s.kafka.events_topic, value=b"%d" % i, partition=i % PARTITIONS)
    p.flush()
    p.close()
    member = make_consumer(s.kafka, isolation_level="read_committed")
    app = _AbortingApp(member)
    member.subscribe([s.kafka.events_topic], listener=app_module._Rebalance(app))
    other, stop = None, threading.Event()
    try:
        def take_polled():
            for records in member.poll(timeout_ms=200).values():
                app.take(records)
            return len(app.polled) == 20

        assert wait_for(take_polled, 30), len(app.polled)
        other = make_consumer(s.kafka, isolation_level="read_committed")
        other.subscribe([s.kafka.events_topic])

        def spin():
            while not stop.is_set():
                other.poll(timeout_ms=100)

        spinning = threading.Thread(target=spin, daemon=True)
        spinning.start()
        again = []  # every offset read after the 20 taken: the poll that ends the rebalance may return some

        def read_on():
            again.extend(r.offset for rs in member.poll(timeout_ms=100).values() for r in rs)
            return app.aborted and len(member.assignment()) == 1

        assert wait_for(read_on, 60), (app.aborted, member.assignment())
        kept = next(iter(member.assignment()))
        assert member.committed(kept) is None
        end = time.monotonic() + 3
        while time.monotonic() < end:
            read_on()
        assert sorted(again) == list(range(10)), again
    finally:
        stop.set()
        if other is not None:
            spinning.join(5)
            other.close(autocommit=False)
        member.close(autocommit=False)


def test_the_first_join_counts_no_revocation(kafka_bootstrap, redis_url, unique):
    """kafka-python calls ``on_partitions_revoked`` with no partitions on a member's first join. Before the fix that
    counted ``kdsm_rebalances_total{kind="revoked"}`` 1 on a plain start."""
    s = make_settings(kafka_bootstrap, redis_url, unique)
    create_topics(s)
    member = make_consumer(s.kafka)
    app = _AbortingApp(member)
    member.subscribe([s.kafka.events_topic], listener=app_module._Rebalance(app))
    try:
        assert wait_for(lambda: member.poll(timeout_ms=200) is not None and member.assignment(), 60)
        counted = {tuple(sample.labels.values()): sample.value for metric in app.metrics.rebalances.collect()
                   for sample in metric.samples if sample.name.endswith("_total")}
    finally:
        member.close(autocommit=False)  # leaving the group revokes: counted, but after the look above
    assert counted == {("assigned",): 1.0}, counted
