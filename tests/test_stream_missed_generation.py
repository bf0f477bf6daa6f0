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
took, not from the position kafka-python kept; the real ``StreamApp`` and listener on the real broker, the
revocation's transaction made to abort once.
"""

from __future__ import annotations

import threading
import traceback

import pytest
from conftest import make_blobs
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.future import Future
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
from streamer.pipeline.checkpoint import Send, TransactionalCheckpointer
from streamer.pipeline.kafka_clients import make_consumer

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


def test_a_partition_given_back_without_a_committed_offset_after_an_aborted_revocation_is_read_again(
        kafka_bootstrap, redis_url, unique, tiny_model_dir, monkeypatch):
    """Exactly once, the real ``StreamApp`` on the real broker, nothing committed yet: the streamer has gathered the
    20 events of both partitions for its first batch (``max_batch`` 21 holds it open) when a second member joins; the
    rebalance listener scores and publishes them (``_publish_gathered``), the revocation's transaction aborts (one
    send refused, as ``test_stream_fetch_process`` does in the loop), ``_drop_polled`` forgets them, and one partition
    comes back. Before the fix the streamer read on from the position kafka-python kept: offsets 0-9 of that partition
    were never scored, alerted or dead-lettered. Its next owners read everything: the streamer the kept partition
    from offset 0, the other member the other one."""
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=21)
    s.stream.max_wait_ms = 60000  # the first batch stays open until the rebalance, then fills up (below)
    s.kafka.delivery, s.kafka.transactional_id = "exactly_once", f"tx-{unique}"
    create_topics(s, partitions=PARTITIONS)
    model = KDSM.load(tiny_model_dir, device="cpu")
    X = make_blobs(n=60, seed=5)[0]
    values = [event(f"e{i}", x, model.feature_names_) for i, x in enumerate(X)]
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(20):  # e0, e2, ... on partition 0; e1, e3, ... on partition 1
        p.send(s.kafka.events_topic, value=values[i], partition=i % PARTITIONS)
    p.flush()
    refused: list[list[str]] = []  # where the abort happened: the functions on the stack
    original = TransactionalCheckpointer.add

    def add(self, batch):
        if not refused and batch.sends and threading.current_thread() is not streamer.thread:
            refused.append([f.name for f in traceback.extract_stack()])
            batch.sends.append(Send(s.kafka.alerts_topic, None, b"refused", Future().failure(RuntimeError("nack"))))
        return original(self, batch)

    monkeypatch.setattr(TransactionalCheckpointer, "add", add)
    sink = Collect()
    streamer = StreamerThread(s, sinks=[sink])
    streamer.start(wait_assigned=0)  # ready is set after the first batch, which waits for the rebalance
    other, stop, others = None, threading.Event(), []
    try:
        assert wait_for(lambda: len(streamer.app._gathered) == 20, 30), len(streamer.app._gathered)
        assert sink.ids() == []  # nothing published, nothing committed
        other = make_consumer(s.kafka, isolation_level="read_committed")
        other.subscribe([s.kafka.events_topic])

        def spin():
            while not stop.is_set():
                for recs in other.poll(timeout_ms=100).values():
                    others.extend((r.partition, r.offset) for r in recs)

        spinning = threading.Thread(target=spin, daemon=True)
        spinning.start()
        assert wait_for(lambda: refused and len(streamer.app.consumer.assignment()) == 1, 60), \
            (refused, streamer.app.consumer.assignment())
        assert "on_partitions_revoked" in refused[0] and "_publish_gathered" in refused[0], refused[0]
        kept = next(iter(streamer.app.consumer.assignment()))
        s.stream.max_wait_ms = 50
        for i in range(20, 20 + 2 * 11, 2):  # 11 more on the kept partition fill the open batch (10 read again)
            p.send(s.kafka.events_topic, value=values[i + kept.partition], partition=kept.partition)
        p.flush()
        mine = {f"e{i}" for i in range(42) if i % PARTITIONS == kept.partition}
        assert wait_for(lambda: set(sink.ids()) == mine, 60), sorted(mine - set(sink.ids()))
        gone = TopicPartition(s.kafka.events_topic, 1 - kept.partition)
        assert wait_for(lambda: sorted(o for part, o in others if part == gone.partition) == list(range(10)), 30), \
            others
    finally:
        stop.set()
        p.close()
        streamer.stop()
        if other is not None:
            spinning.join(5)
            other.close(autocommit=False)
    assert sorted(sink.ids()) == sorted(mine)  # each committed once
    assert streamer.app.checkpoint.aborted_batches == 1
    reader = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=s.kafka.group_id, enable_auto_commit=False)
    assert reader.committed(kept) == 21 and reader.committed(gone) is None
    reader.close()


def test_the_first_join_counts_no_revocation(kafka_bootstrap, redis_url, unique, tiny_model_dir):
    """kafka-python calls ``on_partitions_revoked`` with no partitions on a member's first join. Before the fix that
    counted ``kdsm_rebalances_total{kind="revoked"}`` 1 on a plain start."""
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir))
    create_topics(s)
    streamer = StreamerThread(s).start()
    try:
        counted = {tuple(sample.labels.values()): sample.value for metric in streamer.app.metrics.rebalances.collect()
                   for sample in metric.samples if sample.name.endswith("_total")}
    finally:
        streamer.stop()  # leaving the group revokes: counted, but after the look above
    assert counted == {("assigned",): 1.0}, counted
