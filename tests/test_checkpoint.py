"""The commit order's bookkeeping when a commit fails (``streamer.pipeline.checkpoint``), on stand-in clients.

The real broker's side (a broker killed or hung mid-stream) is in ``test_broker_crash.py``; here the consumer's
``commit`` fails on cue, so each branch of step 4 is reached every time.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from kafka.errors import CommitFailedError, KafkaTimeoutError, NotLeaderForPartitionError
from kafka.future import Future
from kafka.structs import TopicPartition

from streamer.pipeline.batch import ScoredBatch
from streamer.pipeline.checkpoint import Checkpointer, DeliveryError, InFlight

TP = TopicPartition("events", 0)


class Consumer:
    """Commits what it is given, except that each error queued in ``fail`` is raised by one commit."""

    def __init__(self):
        self.fail: list[Exception] = []
        self.committed: list[int] = []

    def commit(self, offsets, timeout_ms=None):
        if self.fail:
            raise self.fail.pop(0)
        self.committed.append(offsets[TP].offset)

    async def commit_async(self, offsets):  # the rebalance listener's commit (drain_async)
        self.commit(offsets)


class Producer:
    def flush(self, timeout=None):
        pass


def batch(first: int, n: int = 5) -> InFlight:
    offsets = np.arange(first, first + n)
    scored = ScoredBatch(topics=["events"] * n, partitions=np.zeros(n, dtype=np.int64), offsets=offsets,
                         timestamps_ms=np.zeros(n, dtype=np.int64), event_ids=list(offsets), event_ts=[None] * n,
                         X=np.zeros((n, 1)), scores=np.zeros(n), severities=np.array([None] * n), model_version="v",
                         schema_hash="h", feature_names=["f0"], thresholds={}, n_dead_letters=0)
    return InFlight(offsets={TP: first + n}, scored=scored, timestamps_ms=[])


def sunk(done) -> list[int]:
    return [int(o) for b in done for o in b.offsets]


def test_a_commit_that_times_out_is_tried_again_with_the_next_and_its_batch_reaches_the_sinks():
    consumer = Consumer()
    cp = Checkpointer(consumer, Producer(), resend_attempts=3)
    consumer.fail.append(KafkaTimeoutError("not answered"))
    cp.add(batch(0))
    assert cp.retire() == [] and consumer.committed == []
    cp.add(batch(5))
    # Before: the second commit covered offsets 0-9 and the sinks (the archive) saw 5-9 only.
    assert sunk(cp.retire()) == list(range(10)) and consumer.committed == [10]
    assert cp.failed_commits == 1 and cp.acked == []


def test_a_commit_refused_after_a_rebalance_leaves_the_events_to_their_next_owner():
    consumer = Consumer()
    cp = Checkpointer(consumer, Producer())
    consumer.fail.append(CommitFailedError("the group rebalanced"))
    cp.add(batch(0))
    assert cp.retire() == [] and cp.acked == []
    cp.add(batch(5))
    assert sunk(cp.retire()) == list(range(5, 10))


def test_commits_failing_again_and_again_stop_the_streamer_without_committing():
    consumer = Consumer()
    cp = Checkpointer(consumer, Producer(), resend_attempts=2)
    consumer.fail.extend(KafkaTimeoutError("not answered") for _ in range(3))
    cp.add(batch(0))
    assert cp.retire() == [] and cp.retire() == []
    with pytest.raises(DeliveryError, match="3 offset commits in a row failed"):
        cp.retire()
    assert consumer.committed == []


def test_a_partition_whose_revocation_commit_was_refused_is_read_again_from_the_first_offset_taken():
    """At least once, no offset committed yet: the listener's commit is refused; if the partition comes back to this
    member, ``resume_at`` sends it to the first record taken (kafka-python's kept position is past both batches)."""
    consumer = Consumer()
    cp = Checkpointer(consumer, Producer())
    for first in (0, 5):
        cp.took({TP: first})
        cp.add(batch(first))
    consumer.fail.append(CommitFailedError("the group rebalanced"))
    assert asyncio.run(cp.drain_async()) == []
    assert cp.resume_at(TP, None) == 0 and cp.resume_at(TP, 7) == 7  # a committed offset always wins
    cp.took({TP: 0})
    cp.add(batch(0))
    assert sunk(cp.retire()) == list(range(5)) and cp.resume_at(TP, None) is None  # committed: the group's offset


class StalledProducer:
    """kafka-python's accumulator in small: sends queue until the broker answers again at ``back_at``, then every
    queued record is written and acknowledged."""

    def __init__(self, back_at: float):
        self.back_at, self.queued, self.written = back_at, [], []

    def send(self, topic, key=None, value=None, headers=None):
        future = Future()
        self.queued.append((value, future))
        return future

    def flush(self, timeout=None):
        end = time.monotonic() + timeout
        while time.monotonic() < min(end, self.back_at):
            time.sleep(0.01)
        if time.monotonic() < self.back_at:
            raise KafkaTimeoutError("flush timed out")
        for value, future in self.queued:
            self.written.append(value)
            future.success(None)
        self.queued = []


def test_a_send_still_queued_after_the_delivery_timeout_is_waited_for_not_copied():
    """The broker answers 0.75 s after the sends, past two of the checkpointer's 0.3 s waits: the records still queued
    are not taken for refused. Before the fix a copy of each was sent beside it and both were written (duplicates
    from a live process)."""
    producer = StalledProducer(back_at=time.monotonic() + 0.75)
    consumer = Consumer()
    cp = Checkpointer(consumer, producer, delivery_timeout_s=0.3)
    b = batch(0)
    cp.send(b, "alerts", b"a1", b"alert-1")
    cp.send(b, "alerts", b"a2", b"alert-2")
    cp.add(b)
    assert sunk(cp.drain()) == list(range(5))
    assert producer.written == [b"alert-1", b"alert-2"] and consumer.committed == [5]


def test_a_send_the_producer_never_settles_stops_without_a_copy_or_a_commit():
    """A producer that neither acknowledges nor fails a record within two waits breaks its own delivery timeout;
    the checkpointer stops (``DeliveryError``) rather than copy a record that may still be written."""
    producer = StalledProducer(back_at=time.monotonic() + 60)
    consumer = Consumer()
    cp = Checkpointer(consumer, producer, delivery_timeout_s=0.1)
    b = batch(0)
    cp.send(b, "alerts", b"a1", b"alert-1")
    cp.add(b)
    with pytest.raises(DeliveryError, match="neither acknowledged nor failed"):
        cp.drain()
    assert len(producer.queued) == 1 and consumer.committed == []


def test_a_successful_rebalance_commit_ends_a_run_of_failed_commits():
    """Three unanswered commits, then the rebalance listener's commit succeeds: one more failure is one in a row,
    not four. Before the fix ``drain_async`` left the count at 3 and that failure stopped the streamer."""
    consumer = Consumer()
    cp = Checkpointer(consumer, Producer(), resend_attempts=3)
    consumer.fail.extend(KafkaTimeoutError("not answered") for _ in range(3))
    for first in (0, 5, 10):
        cp.add(batch(first))
        assert cp.retire() == []
    assert sunk(asyncio.run(cp.drain_async())) == list(range(15)) and consumer.committed == [15]
    consumer.fail.append(KafkaTimeoutError("not answered"))
    cp.add(batch(15))
    assert cp.retire() == []  # tried again with the next commit, no DeliveryError
    cp.add(batch(20))
    assert sunk(cp.retire()) == list(range(15, 25))


def test_at_shutdown_a_failed_commit_is_tried_again_at_once():
    consumer = Consumer()
    cp = Checkpointer(consumer, Producer(), resend_attempts=3)
    consumer.fail.extend(KafkaTimeoutError("not answered") for _ in range(2))
    cp.add(batch(0))
    assert sunk(cp.drain_final()) == list(range(5)) and consumer.committed == [5]


def test_at_shutdown_commits_that_keep_failing_raise_instead_of_a_quiet_stop():
    """Before the fix the final drain's unanswered commit was left for "the next commit", which never came: the
    streamer logged ``stopped`` and exited 0 with the batch uncommitted."""
    consumer = Consumer()
    cp = Checkpointer(consumer, Producer(), resend_attempts=2)
    consumer.fail.extend(KafkaTimeoutError("not answered") for _ in range(3))
    cp.add(batch(0))
    with pytest.raises(DeliveryError, match="3 offset commits in a row failed .* a restart re-reads"):
        cp.drain_final()
    assert consumer.committed == []


class RefusingProducer(Producer):
    """Refuses the first ``refusals`` sends of the message ``alert-1`` (a retriable error, as a leader move); its
    fallback (a small record of its own) and everything else are acknowledged."""

    def __init__(self, refusals: int):
        self.refusals, self.tries = refusals, 0

    def send(self, topic, key=None, value=None, headers=None):
        self.tries += value == b"alert-1"
        if value == b"alert-1" and self.tries <= self.refusals:
            return Future().failure(NotLeaderForPartitionError("the leader moved"))
        return Future().success(f"{topic}:{value!r}")


@pytest.mark.parametrize("refusals", [1, 5], ids=["re-sent", "fallback"])
def test_an_alert_delivered_by_a_re_send_or_its_fallback_is_observed_once(refusals):
    """The alert-latency callback follows the message to the send that is acknowledged. Before the fix it was attached
    to the first send only: alerts delivered by a re-send or a fallback were never observed."""
    acked = []
    cp = Checkpointer(Consumer(), RefusingProducer(refusals), resend_attempts=1)
    b = batch(0)
    cp.send(b, "alerts", b"a1", b"alert-1", on_acked=acked.append)
    cp.add(b)
    assert sunk(cp.drain()) == list(range(5))
    assert len(acked) == 1
