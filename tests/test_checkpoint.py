"""The commit order's bookkeeping when a commit fails (``streamer.pipeline.checkpoint``), on stand-in clients.

The real broker's side (a broker killed or hung mid-stream) is in ``test_broker_crash.py``; here the consumer's
``commit`` fails on cue, so each branch of step 4 is reached every time. At the end, exactly once: a message the
broker refuses for what it is (a topic's small ``max.message.bytes``), on a stand-in transactional producer that fails
records at flush in the two shapes of kafka-python 3.0.12's sender (Tansu ignores ``max.message.bytes``): a batch
refused as a whole, its records failed with the exception that becomes the transaction's ``last_error``; per-record
errors, the bad record's exception its own, its batch's others a plain ``KafkaError``; in both the records not sent
yet fail with the ``last_error``. Not modelled: retries, batch splitting, a fatal error, several partitions in flight.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from kafka.errors import (
    CommitFailedError,
    InvalidRecordError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    TopicAuthorizationFailedError,
)
from kafka.future import Future
from kafka.structs import TopicPartition

from streamer.pipeline.batch import ScoredBatch
from streamer.pipeline.checkpoint import (
    Checkpointer,
    DeliveryError,
    InFlight,
    TransactionAborted,
    TransactionalCheckpointer,
)
from streamer.pipeline.fallback import fallback_record

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


# ---------------------------------------------------------------------------------------------------- exactly once
class TransactionalProducer:
    """kafka-python's (3.0.12) transactional producer in small, with a topic whose ``max.message.bytes`` is ``limit``.

    ``flush`` writes the queued records in order, in produce batches of ``batch_records``; the broker refuses a record
    over ``limit`` bytes (with ``refusal``, another error in its place), or, with ``nack``, every record with a
    retriable error. The refusal has one of kafka-python's
    two shapes. A batch refused as a whole (the default; Kafka's ``MESSAGE_TOO_LARGE``): its records fail with one
    ``MessageSizeTooLargeError``, which becomes the transaction's ``last_error``. Per-record errors (``record_errors``;
    Kafka >= 2.4's ``INVALID_RECORD``, ``Sender._record_exceptions_fn``): the bad record fails with an
    ``InvalidRecordError`` of its own, its batch's other records with a plain ``KafkaError``, and the ``last_error``
    is the top-level ``InvalidRecordError``, another object. Either way the records not sent yet then fail with the
    ``last_error`` (``abort_undrained_batches``), a send raises a plain ``KafkaError``, and only an abort clears it.
    ``_transaction_manager.last_error`` is the producer's. Committed records are ``visible``."""

    def __init__(self, limit: int = 1000, nack: bool = False, record_errors: bool = False, batch_records: int = 1,
                 refusal: type[KafkaError] = MessageSizeTooLargeError):
        self.limit, self.nack, self.record_errors, self.batch_records = limit, nack, record_errors, batch_records
        self.refusal = refusal  # the error of a batch refused as a whole
        self.queued, self.open, self.visible, self.offsets = [], [], [], []
        self.error, self.aborts, self.commits = None, 0, 0
        self._transaction_manager = _TransactionManager(self)

    def send(self, topic, key=None, value=None, headers=None):
        if self.error is not None:
            raise KafkaError("Cannot perform send because at least one previous transactional or idempotent request "
                             "has failed with errors.", self.error)
        future = Future()
        self.queued.append((topic, key, value, future))
        return future

    def flush(self, timeout=None):
        queued, self.queued = self.queued, []
        for at in range(0, len(queued), self.batch_records):
            produce_batch = queued[at:at + self.batch_records]
            if self.error is not None:  # not sent yet when the transaction fell into error
                for *_, future in produce_batch:
                    future.failure(self.error)
            elif self.nack:
                self.error = NotLeaderForPartitionError("the leader moved")
                for *_, future in produce_batch:
                    future.failure(self.error)
            elif any(len(value) > self.limit for _, _, value, _ in produce_batch):
                self._refuse(produce_batch)
            else:
                for topic, key, value, future in produce_batch:
                    self.open.append((topic, key, value))
                    future.success(None)

    def _refuse(self, produce_batch):
        if not self.record_errors:
            self.error = self.refusal("the topic's max.message.bytes")
            for *_, future in produce_batch:
                future.failure(self.error)
            return
        self.error = InvalidRecordError("top-level")  # transition_to_abortable_error, before the futures fail
        for _, _, value, future in produce_batch:
            future.failure(InvalidRecordError("the topic's max.message.bytes") if len(value) > self.limit else
                           KafkaError("Failed to append record because it was part of a batch which had one more "
                                      "more invalid records"))

    def begin_transaction(self):
        self.open = []

    def send_offsets_to_transaction(self, offsets, group):
        if self.error is not None:
            raise KafkaError("in an abortable error state")
        self.offsets.append({tp: o.offset for tp, o in offsets.items()})

    def commit_transaction(self):
        if self.error is not None:
            raise KafkaError("in an abortable error state")
        self.visible.extend(self.open)
        self.commits += 1

    def abort_transaction(self):
        self.queued, self.open, self.error = [], [], None
        self.aborts += 1


class _TransactionManager:
    def __init__(self, producer: TransactionalProducer):
        self.producer = producer

    @property
    def last_error(self):
        return self.producer.error

    def has_fatal_error(self) -> bool:
        return False


class GroupConsumer(Consumer):
    def group_metadata(self):
        return "group"

    def assignment(self):
        return {TP}


def alert(offset: int, reads: int) -> bytes:
    """An alert as the loop builds it, for the event at ``offset``; ``scored_at`` differs from one read to the next."""
    return json.dumps({"alert_id": f"a{offset}", "event_id": f"e{offset}", "scored_at": f"read {reads}",
                       "score": 9.5, "source": {"topic": TP.topic, "partition": TP.partition, "offset": offset},
                       "top_features": [{"name": "f0", "value": 1.0}]}, separators=(",", ":")).encode()


def dead(offset: int, reads: int, payload_bytes: int) -> bytes:
    return json.dumps({"reason": "missing_feature", "message": "f0",
                       "source": {"topic": TP.topic, "partition": TP.partition, "offset": offset},
                       "dead_at": f"read {reads}", "payload": "x" * payload_bytes}, separators=(",", ":")).encode()


def read_and_publish(cp, first: int, messages, reads: int) -> None:
    """One read of the batch of events ``first``..``first + 4``: its messages built again, sent, the batch added
    (exactly once: committed, or ``TransactionAborted``)."""
    b = batch(first)
    for topic, make in messages:
        cp.send(b, topic, b"k", make(reads))
    cp.add(b)


def publish_until_committed(cp, first: int, messages, most: int = 10) -> int:
    """The loop's abort / rewind / read again cycle for one batch; returns how many reads it took."""
    for reads in range(1, most + 1):
        try:
            read_and_publish(cp, first, messages, reads)
            return reads
        except TransactionAborted:
            continue
    raise AssertionError(f"not committed after {most} reads")


def test_exactly_once_a_message_the_broker_refuses_is_replaced_by_its_fallback_when_read_again():
    """The topic's ``max.message.bytes`` refuses a dead letter at flush: the transaction aborts once, the re-read
    sends that event's fallback record (at-least-once's: the short fields, ``publish_fallback``) at once, and commits.
    The alert after it, failed with the same exception as a record not sent yet, goes again in full. Before the fix
    every read aborted: after 4, ``DeliveryError`` and exit 1, and the restart met the same batch (the partition
    stopped for good)."""
    producer = TransactionalProducer(limit=1000)
    cp = TransactionalCheckpointer(GroupConsumer(), producer, resend_attempts=3)
    messages = [("alerts", lambda r: alert(1, r)), ("dead", lambda r: dead(2, r, 5000)), ("alerts", lambda r: alert(3, r))]
    assert publish_until_committed(cp, 0, messages) == 2
    assert producer.aborts == 1 and cp.aborted_batches == 1 and cp._aborts_in_a_row == 0
    assert producer.offsets == [{TP: 5}] and sunk(cp.retire()) == list(range(5))
    (_, _, a1), (_, _, fb), (_, _, a3) = producer.visible
    assert a1 == alert(1, 2) and a3 == alert(3, 2)  # in full
    assert fb == fallback_record(dead(2, 2, 5000), repr(MessageSizeTooLargeError("the topic's max.message.bytes")))
    kept = json.loads(fb)
    assert kept["source"]["offset"] == 2 and kept["publish_fallback"]["left_out"] == ["payload"]
    assert cp.refused == {}  # committed: forgotten


def test_exactly_once_refusals_do_not_count_toward_the_abort_limit():
    """Three refused dead letters in one batch, ``resend_attempts`` 1: each abort learns one (the others fail with its
    exception, as records not sent yet), so four reads commit the batch with three fallbacks; none of the aborts
    counts toward the limit."""
    producer = TransactionalProducer(limit=1000)
    cp = TransactionalCheckpointer(GroupConsumer(), producer, resend_attempts=1)
    messages = [("dead", lambda r, o=o: dead(o, r, 5000)) for o in (1, 2, 3)] + [("alerts", lambda r: alert(4, r))]
    assert publish_until_committed(cp, 0, messages) == 4
    assert [json.loads(v).get("publish_fallback") is not None for _, _, v in producer.visible] == [True] * 3 + [False]
    assert producer.offsets == [{TP: 5}] and len(cp.refused) == 0


def test_exactly_once_a_record_failed_after_a_per_record_refusal_is_sent_again_in_full():
    """Per-record errors (Kafka >= 2.4): the dead letter is refused with an error of its own, the alert in its produce
    batch fails with a plain ``KafkaError``, the alert queued behind with the transaction's ``last_error`` (another
    ``InvalidRecordError``). Only the dead letter is refused: the re-read sends its fallback and both alerts in full,
    and the abort is not counted. Before the fix the alert queued behind, the first to fail with the ``last_error``,
    was taken for refused too: its fallback was committed in its place (its content lost)."""
    producer = TransactionalProducer(limit=1000, record_errors=True, batch_records=2)
    cp = TransactionalCheckpointer(GroupConsumer(), producer, resend_attempts=1)
    messages = [("dead", lambda r: dead(1, r, 5000)), ("alerts", lambda r: alert(2, r)), ("alerts", lambda r: alert(3, r))]
    with pytest.raises(TransactionAborted):
        read_and_publish(cp, 0, messages, 1)
    assert [k[3] for k in cp.refused] == [1] and cp._aborts_in_a_row == 0
    assert publish_until_committed(cp, 0, messages) == 1
    (_, _, fb), (_, _, a2), (_, _, a3) = producer.visible
    assert json.loads(fb)["publish_fallback"]["left_out"] == ["payload"]
    assert a2 == alert(2, 1) and a3 == alert(3, 1)  # in full
    assert producer.aborts == 1 and producer.offsets == [{TP: 5}] and cp.refused == {}


def test_exactly_once_a_non_retriable_error_not_about_the_record_is_not_remembered_and_counts():
    """A ``TopicAuthorizationFailedError`` (like a sequence, epoch or producer-id error) is non-retriable but says
    nothing of the record: it is not remembered (its fallback would not help, and would replace the message for
    good), and each abort counts: ``resend_attempts`` 1 stops at the second. Before the fix any non-retriable broker
    error was taken for a refusal of the record: the re-read committed its fallback, the abort not counted."""
    producer = TransactionalProducer(limit=1000, refusal=TopicAuthorizationFailedError)
    cp = TransactionalCheckpointer(GroupConsumer(), producer, resend_attempts=1)
    messages = [("alerts", lambda r: alert(1, r)), ("dead", lambda r: dead(2, r, 5000))]
    with pytest.raises(TransactionAborted):
        read_and_publish(cp, 0, messages, 1)
    assert cp.refused == {} and cp._aborts_in_a_row == 1
    with pytest.raises(DeliveryError, match="2 transactions in a row aborted"):
        read_and_publish(cp, 0, messages, 2)
    assert producer.visible == [] and producer.offsets == [] and cp.refused == {}


def test_exactly_once_retriable_failures_still_stop_after_the_abort_limit():
    producer = TransactionalProducer(nack=True)
    cp = TransactionalCheckpointer(GroupConsumer(), producer, resend_attempts=2)
    messages = [("alerts", lambda r: alert(1, r))]
    for _ in range(2):
        with pytest.raises(TransactionAborted):
            read_and_publish(cp, 0, messages, 1)
    with pytest.raises(DeliveryError, match="3 transactions in a row aborted"):
        read_and_publish(cp, 0, messages, 1)
    assert producer.visible == [] and producer.offsets == [] and cp.refused == {}


def test_exactly_once_a_refused_fallback_stops_after_the_abort_limit():
    """A broker that takes nothing (every record over its limit, the fallback too): the first abort learns the
    message, the re-reads whose fallback is refused count, and ``DeliveryError`` stops the streamer uncommitted."""
    producer = TransactionalProducer(limit=10)
    cp = TransactionalCheckpointer(GroupConsumer(), producer, resend_attempts=1)
    messages = [("dead", lambda r: dead(1, r, 50))]
    with pytest.raises(DeliveryError, match="2 transactions in a row aborted"):
        publish_until_committed(cp, 0, messages)
    assert producer.aborts == 3 and producer.visible == [] and producer.offsets == []
