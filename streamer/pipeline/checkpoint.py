"""The commit order, in one place: publish, wait for the broker's acks, then commit offsets.

At-least-once (DESIGN 6) rests on this order for every batch:

1. every alert and dead letter of the batch is handed to the producer
   (``send``), which batches them (linger_ms / batch_size) and ships them
   with acks=all;
2. before a batch's offsets are committed, every one of its futures must be
   acknowledged: ``retire`` checks without blocking, ``drain`` flushes the
   producer (one flush covers every batch in flight) and waits;
3. a send the producer or broker refused (a failed future, or an error
   ``send`` raised at once, such as ``MessageSizeTooLargeError``) is re-sent
   up to ``resend_attempts`` times; a send not answered yet is waited for,
   never copied (the producer fails it by itself after its
   ``delivery_timeout_ms``, set to ``kafka.delivery_timeout_s``; a copy of a
   record still queued would be written beside it); a message refused for what it is (a
   non-retriable error) or still refused after the retries is replaced by a
   small fallback record (``publish_fallback``; the message's short headers
   kept), so one message never holds up its partition; the batch is not
   committed until every message or its fallback is acknowledged; if a
   fallback is refused too (the broker is gone), ``DeliveryError`` stops the
   streamer *without* committing, so a restart re-reads the batch
   (duplicates, never loss);
4. only then are the offsets (last offset + 1 per partition) committed for
   the oldest batches first (every batch, or with ``kafka.commit_interval_ms``
   the acknowledged batches at most once per interval: fewer synchronous
   round trips, more events re-read after a crash): synchronously from the consumer loop, through
   ``commit_async`` awaited on kafka-python's IO thread from the rebalance
   listener (``drain_async``; a blocking commit there would deadlock); a
   commit refused because the partitions moved to another member is logged
   and counted: the new owner re-reads those events (bounded duplicates)
   from the committed offset, or, where the group has none yet and the
   partition comes back here, from the first offset this member took
   (``resume_at``: kafka-python keeps its position, past those events);
   a commit that fails while this member keeps its partitions (unanswered,
   the coordinator moving) is retried with the next commit, its batches
   first, since the consumer has read past them and would not re-read them;
   ``resend_attempts`` failures in a row raise ``DeliveryError``: the streamer
   stops without committing and a restart re-reads the batches;
5. sinks see a batch only after its commit succeeded.

A crash between 1 and 4 leaves the offsets where they were: the events come
back and are scored again, so duplicates are bounded by the batches in
flight (``stream.max_in_flight``) plus, with a commit interval, the
acknowledged batches of one interval.

Exactly-once (``kafka.delivery: exactly_once``, ``TransactionalCheckpointer``):
one Kafka transaction per batch, so a ``read_committed`` subscriber sees every
alert and dead letter once, and only when the batch's offsets are committed:

1. the batch's first message begins the transaction (``begin_transaction``);
   every alert and dead letter is sent in it; a message the producer refuses
   before it leaves (too large) is replaced by its fallback record at once,
   in the same transaction (the refusal does not touch the transaction), and
   so is a message the broker refused for what it is in an aborted
   transaction (step 5);
2. the producer is flushed and every message must be acknowledged; any
   failed or unacknowledged send aborts (step 5): a record the broker refuses
   puts the transaction in error, so neither it nor its fallback can be
   committed in that transaction;
3. the batch's offsets (last offset + 1 per partition) go into the
   transaction with the consumer's group metadata
   (``send_offsets_to_transaction``, KIP-447 fencing on Kafka >= 2.5);
4. ``commit_transaction`` writes the commit markers: alerts, dead letters
   and offsets become visible together; sinks see the batch after this;
5. on any publish or commit error: ``abort_transaction`` (nothing of the
   batch becomes visible, the offsets stay), ``TransactionAborted`` tells the
   loop to drop what it polled after the batch and ``rewind`` the consumer to
   the committed offsets (without one, to the first offset taken from the
   partition, whatever ``auto_offset_reset`` says), and the batch is read and
   scored again;
   a message the broker refused for what it is (an error about its content:
   ``MessageSizeTooLargeError`` from a topic's small ``max.message.bytes``,
   ``RecordListTooLargeError``, ``InvalidRecordError``, ``CorruptRecordError``,
   ``InvalidTimestampError``; not a permission, sequence or epoch error) is
   remembered by its event
   (the ``source`` topic, partition and offset every alert and dead letter
   carries) and destination topic; when the event's alert or dead letter is
   sent again, its fallback record goes in its place at once (the same record
   and code as at least once), so the refusal stops the partition for one
   abort only; kafka-python fails the records it had not sent yet when the
   transaction fell into error with the transaction's ``last_error`` (and
   refuses any send after it): a record is taken for refused only when its
   failure is its own (an exception not the transaction's ``last_error`` when
   it failed: Kafka >= 2.4's per-record errors give the bad record a fresh
   one) or, when no record of the batch failed so, when it is the first to
   fail with the ``last_error`` (a batch refused as a whole, e.g. too large:
   its exception becomes the ``last_error``);
   ``resend_attempts`` aborts in a row raise ``DeliveryError``: the streamer
   stops without committing; an abort that remembered a refused message and
   met no retriable failure (nor an unanswered send) is not counted (each such
   abort remembers one more message of a finite batch, so the cycle ends);
6. a producer fenced by a newer one with the same transactional id (a
   restarted instance, a duplicate process) raises ``Fenced``: it must stop,
   its open transaction is aborted by the broker, nothing of it is visible;
7. kafka-python waits for the answer to ``send_offsets_to_transaction``,
   ``commit_transaction`` and ``abort_transaction`` without a bound of its
   own (a request the broker never answers fails after the producer's
   ``request_timeout_ms``, at most 30 s, and may be retried); each waits here at most
   ``delivery_timeout_s``, then ``Unresolved`` stops the streamer: the
   transaction's outcome is unknown and the producer is still inside the
   call, so nothing more may be sent with it.

A crash or a stop anywhere leaves the transaction open; the restarted instance's
``init_transactions`` (same transactional id) aborts it, and the batch is
read again from the committed offsets: no duplicate, no loss. Sinks (the
archive) run after the commit, outside the transaction, as under
at-least-once; the archive keeps its (topic, partition, offset)
de-duplication (docs/streaming.md, "Exactly once").
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
from kafka.errors import (
    CommitFailedError,
    CorruptRecordError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    ProducerFencedError,
    RebalanceInProgressError,
    RecordListTooLargeError,
    TransactionalIdAuthorizationFailedError,
    UnknownMemberIdError,
)
from kafka.future import Future
from kafka.structs import OffsetAndMetadata, TopicPartition

from .batch import ScoredBatch
from .fallback import fallback_headers, fallback_key, fallback_record

log = logging.getLogger("kdsm.checkpoint")


class DeliveryError(RuntimeError):
    """The broker did not acknowledge an alert or dead letter, nor its fallback; offsets were not committed.
    The streamer stops with one line (``event`` names it in the log) and exits 1; a restart re-reads the batch."""

    event = "delivery_stopped"


class Fenced(DeliveryError):
    """Another producer with this transactional id took over: this instance is a zombie and must stop."""

    event = "fenced"


class Unresolved(DeliveryError):
    """The broker did not answer a transactional request in time: the transaction's outcome is unknown, the
    producer is still waiting inside the call; only a restart (``init_transactions``) settles it."""

    event = "transaction_unresolved"


class TransactionAborted(RuntimeError):
    """A batch's transaction was aborted: nothing of it is visible; the loop rewinds and reads it again."""


@dataclass
class Send:
    topic: str
    key: bytes | None
    value: bytes
    future: Future
    fallback: bool = False  # this is the small record that replaced a refused message
    headers: list | None = None  # Kafka headers, (name, value) pairs (a dead letter's: the event's own)
    on_acked: Callable | None = None  # called with the record's metadata when it, a re-send or its fallback is acked
    failed_seq: int | None = None  # exactly once: when its future failed, in the order of the producer's failures
    failed_in_error: bool = False  # exactly once: it failed with the transaction's last_error of that moment

    def ok(self) -> bool:
        return self.future.is_done and self.future.succeeded()


@dataclass
class InFlight:
    """One published batch waiting for its acks and its commit."""

    offsets: dict[TopicPartition, int]
    scored: ScoredBatch | None
    timestamps_ms: list[int]  # sampled Kafka timestamps, for the end-to-end latency metric
    sends: list[Send] = field(default_factory=list)

    def acked(self) -> bool:
        return all(s.future.is_done for s in self.sends)


class Checkpointer:
    def __init__(self, consumer, producer, metrics=None, delivery_timeout_s: float = 30.0, resend_attempts: int = 3,
                 commit_interval_s: float = 0.0):
        self.consumer, self.producer, self.metrics = consumer, producer, metrics
        self.delivery_timeout_s, self.resend_attempts = delivery_timeout_s, resend_attempts
        self.commit_interval_s = commit_interval_s
        self.in_flight: deque[InFlight] = deque()
        self.acked: list[InFlight] = []  # out of flight, every send done, waiting for the interval's commit
        self._last_commit = time.monotonic()
        self.committed_batches = 0
        self.failed_commits = 0
        self._failed_in_a_row = 0
        # Per partition of which no offset is committed yet, the first offset this member took: where the partition
        # is read again from after a batch was dropped, aborted or not committed (``resume_at``).
        self.uncommitted_from: dict[TopicPartition, int] = {}

    def send(self, batch: InFlight, topic: str, key: bytes | None, value: bytes, headers: list | None = None,
             on_acked: Callable | None = None) -> Future:
        """Hand one message to the producer; returns its future (resolved by the broker's ack).

        A refusal before it leaves (e.g. MessageSizeTooLargeError) is a failed
        future, handled like a nack: re-sent, then replaced by its fallback.
        ``on_acked(metadata)`` runs on the producer's I/O thread when the message, a re-send or its fallback is
        acknowledged.
        """
        s = self._dispatch(topic, key, value, headers, on_acked)
        batch.sends.append(s)
        return s.future

    def took(self, first_offsets: dict[TopicPartition, int]) -> None:
        """Records were taken from these partitions (their first offset each), to be scored or dropped."""
        for tp, offset in first_offsets.items():
            if offset < self.uncommitted_from.get(tp, offset + 1):
                self.uncommitted_from[tp] = offset

    def resume_at(self, tp: TopicPartition, committed: int | None) -> int | None:
        """Where ``tp`` is read again from: the group's committed offset; without one, the first offset this member
        took from it (what it polled was never committed: kafka-python would read on from its position, past it);
        None for a partition never read (``auto_offset_reset``)."""
        return committed if committed is not None else self.uncommitted_from.get(tp)

    def add(self, batch: InFlight) -> None:
        self.in_flight.append(batch)
        self._gauge()

    def retire(self) -> list[ScoredBatch]:
        """Commit the oldest batches whose sends are all acknowledged (no waiting); with a commit interval,
        only once it has passed since the last commit (the batches wait out of flight until then)."""
        moved = 0
        while self.in_flight and self.in_flight[0].acked():
            self.acked.append(self.in_flight.popleft())
            moved += 1
        if not self.acked or time.monotonic() - self._last_commit < self.commit_interval_s:
            if moved:
                self._gauge()
            return []
        ready, self.acked = self.acked, []
        return self._commit(ready)

    def drain(self) -> list[ScoredBatch]:
        """Flush the producer, wait for every ack, commit every batch in flight and every acknowledged one
        (shutdown, and backpressure without a commit interval)."""
        ready = self._take_all()
        return self._commit(ready)

    def drain_final(self) -> list[ScoredBatch]:
        """Shutdown: ``drain``; a commit that fails is tried again at once, as there is no next commit to take it
        (step 4: ``resend_attempts`` + 1 failures in a row raise ``DeliveryError``, so the streamer exits 1 rather
        than log ``stopped`` with batches uncommitted; a restart re-reads them)."""
        done = self.drain()
        while self.acked:
            time.sleep(min(2.0, 0.2 * 2 ** (self._failed_in_a_row - 1)))
            ready, self.acked = self.acked, []
            done += self._commit(ready)
        return done

    def settle(self) -> list[ScoredBatch]:
        """Backpressure: flush the producer and wait for the acks in flight. Without a commit interval that is
        ``drain``; with one, the acknowledged batches wait for the interval as ``retire`` has them, and only
        batches still unacknowledged after the flush take ``drain``'s path (re-sent, their fallbacks, or
        ``DeliveryError``)."""
        if self.commit_interval_s <= 0:
            return self.drain()
        if self.in_flight:
            self._flush()
        done = self.retire()
        return done + self.drain() if self.in_flight else done

    async def drain_async(self) -> list[ScoredBatch]:
        """``drain`` for the rebalance listener, which runs on kafka-python's IO thread: the commit is
        ``commit_async``, awaited, so it completes before the partitions go (``consumer.commit`` would
        block on the very thread that must carry it out)."""
        ready = self._take_all()
        offsets = self._acked_offsets(ready)
        if offsets:
            self._last_commit = time.monotonic()
            try:
                await self.consumer.commit_async(offsets)
            except KafkaError as e:
                return self._commit_failed(ready, e)
            self._failed_in_a_row = 0
        return self._committed(ready)

    # ------------------------------------------------------------------ internals
    def _dispatch(self, topic: str, key: bytes | None, value: bytes, headers: list | None = None,
                  on_acked: Callable | None = None, fallback: bool = False) -> Send:
        """Send one message; ``on_acked`` follows it, as it follows a re-send or a fallback in its place."""
        s = Send(topic, key, value, self._send(topic, key, value, headers), fallback=fallback, headers=headers,
                 on_acked=on_acked)
        if on_acked is not None:
            s.future.add_callback(on_acked)
        return s

    def _send(self, topic: str, key: bytes | None, value: bytes, headers: list | None = None) -> Future:
        try:
            return self.producer.send(topic, key=key, value=value, headers=headers or None)
        except KafkaError as e:  # refused before it left (e.g. MessageSizeTooLargeError): handled like a nack
            return Future().failure(e)

    def _flush(self) -> None:
        try:
            self.producer.flush(timeout=self.delivery_timeout_s)
        except KafkaTimeoutError:
            pass  # what is still unacknowledged counts as refused below: re-sent, then its fallback

    def _take_all(self) -> list[InFlight]:
        if self.in_flight:
            self._flush()
        ready = self.acked + list(self.in_flight)  # oldest first
        self.acked = []
        self.in_flight.clear()
        return ready

    def _await_answers(self, sends: list[Send]) -> None:
        """Wait until the producer has settled every send, acknowledged or failed.

        A send still pending is never taken for refused: it is queued or awaiting the broker's answer, and a copy
        sent now would be written beside it once the broker answers (duplicates from a live process). The producer
        fails a record by itself after its ``delivery_timeout_ms`` (``make_producer``: ``kafka.delivery_timeout_s``),
        counted from before the first wait; the second covers the moments its sender thread takes to say so.
        """
        for _ in range(2):
            if all(s.future.is_done for s in sends):
                return
            self._flush()
        pending = sum(not s.future.is_done for s in sends)
        if pending:
            raise DeliveryError(f"{pending} alert/dead-letter message(s) neither acknowledged nor failed by the "
                                f"producer within 2 x {self.delivery_timeout_s:g} s (kafka.delivery_timeout_s); "
                                "not re-sent, offsets not committed")

    def _ensure_acked(self, batch: InFlight) -> None:
        for attempt in range(self.resend_attempts + 2):
            self._await_answers(batch.sends)
            failed = [s for s in batch.sends if not s.ok()]
            if not failed:
                return
            if self.metrics is not None:
                self.metrics.delivery_errors.inc(len(failed))
            err = failed[0].future.exception
            log.warning({"event": "delivery_failed", "messages": len(failed), "attempt": attempt + 1, "error": repr(err)})
            if any(s.fallback for s in failed):
                break  # even the small record was refused: the broker is not taking anything
            if attempt > 0 or any(_retriable(s) for s in failed):
                time.sleep(min(2.0, 0.2 * 2**attempt))
            last = attempt >= self.resend_attempts
            batch.sends = [s for s in batch.sends if s.ok()] + [
                self._fall_back(s) if last or not _retriable(s)
                else self._dispatch(s.topic, s.key, s.value, s.headers, s.on_acked)
                for s in failed]
        raise DeliveryError(f"{len(failed)} alert/dead-letter message(s) and their fallbacks were not acknowledged "
                            "by the broker; offsets not committed")

    def _fall_back(self, s: Send) -> Send:
        """The small record in place of a message the producer or broker will not take."""
        error = repr(s.future.exception)
        value = fallback_record(s.value, error)
        if self.metrics is not None:
            self.metrics.fallbacks.labels(s.topic).inc()
        log.warning({"event": "publish_fallback", "topic": s.topic, "original_bytes": len(s.value), "error": error})
        key, headers = fallback_key(s.key), fallback_headers(s.headers)
        return self._dispatch(s.topic, key, value, headers, s.on_acked, fallback=True)

    def _acked_offsets(self, batches: list[InFlight]) -> dict[TopicPartition, OffsetAndMetadata]:
        """Steps 2-3 for every batch, then the offsets to commit (oldest first: a later batch's supersedes)."""
        for b in batches:
            self._ensure_acked(b)  # nothing is committed before its messages are acked
        offsets: dict[TopicPartition, int] = {}
        for b in batches:
            for tp, off in b.offsets.items():
                offsets[tp] = max(off, offsets.get(tp, -1))
        return {tp: OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()}

    def _commit(self, batches: list[InFlight]) -> list[ScoredBatch]:
        if not batches:
            return []
        offsets = self._acked_offsets(batches)
        if offsets:
            self._last_commit = time.monotonic()
            try:
                # Bounded like a delivery (kafka-python's own bound is request_timeout_ms, 30 s): a commit the
                # broker does not answer in time fails, and is tried again with the next one (step 4).
                self.consumer.commit(offsets, timeout_ms=int(self.delivery_timeout_s * 1000))
            except KafkaError as e:
                return self._commit_failed(batches, e, retry=not isinstance(e, _GROUP_MOVED_ON))
            self._failed_in_a_row = 0  # "in a row": every successful commit ends the run (drain_async's too)
        return self._committed(batches)

    def _commit_failed(self, batches: list[InFlight], e: Exception, retry: bool = False) -> list[ScoredBatch]:
        self.failed_commits += 1
        if self.metrics is not None:
            self.metrics.commits.labels("failed").inc()
        if not retry:
            # The partitions moved (rebalance): their next owner, or this member after it rejoins, reads the
            # events again from the committed offsets.
            log.warning({"event": "commit_failed", "batches": len(batches), "error": repr(e),
                         "effect": "these events will be re-delivered (at least once)"})
            self._gauge()
            return []
        # The partitions stay here, and the consumer has read past these batches: nothing would read them again,
        # and a later commit would cover their offsets without the sinks (the archive) ever seeing them.
        self._failed_in_a_row += 1
        if self._failed_in_a_row > self.resend_attempts:
            raise DeliveryError(f"{self._failed_in_a_row} offset commits in a row failed (last: {e!r}); offsets of "
                                f"{len(batches)} batch(es) not committed: a restart re-reads their events, none is lost")
        self.acked[:0] = batches  # the oldest first: committed with the next commit, then handed to the sinks
        log.warning({"event": "commit_failed", "batches": len(batches), "error": repr(e),
                     "attempt": self._failed_in_a_row, "effect": "tried again with the next commit"})
        self._gauge()
        return []

    def _committed(self, batches: list[InFlight]) -> list[ScoredBatch]:
        if not batches:
            return []
        now = time.time()
        self.committed_batches += len(batches)
        for b in batches:
            for tp in b.offsets:
                self.uncommitted_from.pop(tp, None)  # the group has an offset for it now
        if self.metrics is not None:
            self.metrics.commits.labels("ok").inc()
            self.metrics.last_commit.set(now)
            for b in batches:
                for ts in b.timestamps_ms:
                    if ts > 0:
                        self.metrics.e2e_seconds.observe(max(0.0, now - ts / 1000.0))
        done = []
        for b in batches:
            if b.scored is not None:
                b.scored.committed_at = now
                done.append(b.scored)
        self._gauge()
        return done

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.in_flight.set(len(self.in_flight))


# A commit refused because the group moved on without this member's partitions (rebalance, expired session).
_GROUP_MOVED_ON = (CommitFailedError, RebalanceInProgressError, IllegalGenerationError, UnknownMemberIdError,
                   FencedInstanceIdError)
_FATAL = (ProducerFencedError, InvalidProducerEpochError, TransactionalIdAuthorizationFailedError)


class TransactionalCheckpointer(Checkpointer):
    """Exactly-once: one transaction per batch (the order is in the module docstring, steps 1-6)."""

    def __init__(self, consumer, producer, metrics=None, delivery_timeout_s: float = 30.0, resend_attempts: int = 3,
                 transactional_id: str = ""):
        super().__init__(consumer, producer, metrics, delivery_timeout_s, resend_attempts)
        self.transactional_id = transactional_id
        self._open = False  # a transaction is begun and not yet committed or aborted
        self._done: list[ScoredBatch] = []  # committed, not yet handed to the sinks
        self.aborted_batches = 0
        self._aborts_in_a_row = 0
        # Messages the broker refused for what they are in an aborted transaction, by (destination topic, event):
        # the refusal, sent again as the fallback's reason when the event's message is sent again (step 5).
        self.refused: dict[tuple, BaseException] = {}
        self._failures = itertools.count()  # orders the producer's failures (``failed_seq``)

    def warm_up(self, group_id: str, topics: list[str]) -> None:
        """An empty transaction at start: the coordinator look-ups (~0.2 s on Tansu) and the topics' metadata
        are paid here rather than by the first batch's latency. Nothing becomes visible."""
        for topic in topics:
            self.producer.partitions_for(topic)
        try:
            self._begin()
            self._bounded("send_offsets_to_transaction", self.producer.send_offsets_to_transaction, {}, group_id)
            self._bounded("commit_transaction", self.producer.commit_transaction)
        except KafkaError as e:
            if self._fatal(e):
                raise self._fenced(e) from None
            raise
        finally:
            self._open = False

    def send(self, batch: InFlight, topic: str, key: bytes | None, value: bytes, headers: list | None = None,
             on_acked: Callable | None = None) -> Future:
        self._begin()  # step 1
        refusal = self.refused.get(_identity(topic, key, value)) if self.refused else None
        if refusal is not None:  # the broker refused it in an aborted transaction: its fallback at once (step 5)
            s = self._fall_back(Send(topic, key, value, Future().failure(refusal), headers=headers, on_acked=on_acked))
        else:
            s = self._dispatch(topic, key, value, headers, on_acked)
            if s.future.failed() and _refused_for_itself(s.future.exception):
                s = self._fall_back(s)  # refused before it left (too large): the small record, same transaction
        batch.sends.append(s)
        return s.future

    def add(self, batch: InFlight) -> None:
        """Steps 2-4 for one batch, now; raises ``TransactionAborted`` (step 5) or ``Fenced`` (step 6)."""
        failed: list[Send] = []
        remembered = 0
        try:
            self._begin()  # a batch without messages still commits its offsets in a transaction
            if batch.sends:
                self._flush()
            failed = [s for s in batch.sends if not s.ok()]
            if failed:  # step 2
                remembered = self._remember(failed)
                err = next((s.future.exception for s in failed if s.future.is_done), None)
                raise TransactionAborted(f"{len(failed)} message(s) not acknowledged: {err!r}")
            offsets = self._acked_offsets([batch])
            if offsets:  # step 3
                self._bounded("send_offsets_to_transaction", self.producer.send_offsets_to_transaction, offsets,
                              self.consumer.group_metadata())
            self._bounded("commit_transaction", self.producer.commit_transaction)  # step 4
            self._open = False
        except (KafkaError, TransactionAborted) as e:
            if self._fatal(e):
                raise self._fenced(e) from None
            # Counted toward the limit unless it only taught which messages to replace (step 5).
            counted = not remembered or any(not s.future.is_done or _retriable(s) for s in failed)
            self._abort(batch, e, counted, remembered)  # step 5
            raise TransactionAborted(repr(e)) from None
        self._aborts_in_a_row = 0
        self._forget_committed(batch.offsets)
        self._done.extend(self._committed([batch]))

    def retire(self) -> list[ScoredBatch]:
        done, self._done = self._done, []
        return done

    def drain(self) -> list[ScoredBatch]:
        return self.retire()

    async def drain_async(self) -> list[ScoredBatch]:
        return self.retire()

    def rewind(self) -> None:
        """After an abort: every assigned partition back to its committed offset, or without one to the first
        offset taken from it (``resume_at``), so the aborted batch and anything polled after it are read again.
        A partition never read keeps its position (``auto_offset_reset``'s, untouched: with ``latest`` a seek
        to the end would skip what arrived since)."""
        for tp in self.consumer.assignment():
            at = self.resume_at(tp, self.consumer.committed(tp))
            if at is not None:
                self.consumer.seek(tp, at)

    def _begin(self) -> None:
        if not self._open:
            try:
                self.producer.begin_transaction()
            except KafkaError as e:
                if self._fatal(e):
                    raise self._fenced(e) from None
                raise
            self._open = True

    def _dispatch(self, topic: str, key: bytes | None, value: bytes, headers: list | None = None,
                  on_acked: Callable | None = None, fallback: bool = False) -> Send:
        s = super()._dispatch(topic, key, value, headers, on_acked, fallback)
        s.future.add_errback(self._failed_now, s)
        return s

    def _failed_now(self, s: Send, error: BaseException) -> None:
        """Errback (the producer's I/O thread, or at once for a refusal before the record left). Whether it failed
        with the transaction's ``last_error`` is noted now: a later failed batch replaces it."""
        s.failed_seq = next(self._failures)
        manager = getattr(self.producer, "_transaction_manager", None)
        s.failed_in_error = manager is not None and error is getattr(manager, "last_error", None)

    def _remember(self, failed: list[Send]) -> int:
        """Step 5: remember the messages of an aborting batch that the broker refused for what they are; returns
        how many were not remembered yet.

        kafka-python (3.0.12) fails a refused batch and then the records it has not sent yet with the transaction's
        ``last_error``, and any send after it with a plain ``KafkaError``. Two shapes: with per-record errors (Kafka
        >= 2.4, an invalid record) the bad record gets an exception of its own (``_record_exceptions_fn``), its
        batch's other records a plain ``KafkaError``, and the ``last_error`` is the top-level exception, which only
        records failed afterwards get: those were not refused, they would have been taken. Without them (a batch
        refused as a whole: too large) its records fail with the exception that became the ``last_error``, as the
        records failed afterwards do. So a record whose failure is its own (``failed_in_error`` false) is refused
        when its error says so (``_refused_for_itself``); the records failed with the ``last_error`` are looked at
        only when no record of the batch was refused so. Of the records failed with one exception object only the
        first to fail counts (the others were not sent). A record still refused is found again on the next abort."""
        done = sorted((s for s in failed if s.future.failed()),
                      key=lambda s: s.failed_seq if s.failed_seq is not None else float("inf"))

        def refusals(in_error: bool) -> list[Send]:
            return [s for s in _first_per_error(s for s in done if s.failed_in_error == in_error)
                    if not s.fallback and _refused_for_itself(s.future.exception)]

        refused = refusals(False) or refusals(True)  # the latter: a batch refused as a whole (its exception is the last_error)
        new = 0
        for s in refused:
            e = s.future.exception
            ident = _identity(s.topic, s.key, s.value)
            if ident in self.refused:
                continue
            self.refused[ident] = e
            new += 1
            if len(self.refused) > _REFUSED_KEPT:  # bounded: the oldest go first (a partition that moved away)
                del self.refused[next(iter(self.refused))]
            log.warning({"event": "publish_refused", "topic": s.topic, "source": _source_of(ident),
                         "original_bytes": len(s.value), "error": repr(e),
                         "effect": "its fallback record is sent in its place when the batch is read again"})
        return new

    def _forget_committed(self, offsets: dict[TopicPartition, int]) -> None:
        """After a commit, the refusals of events it covered (their fallbacks are written, they are not read again)
        and of partitions no longer assigned (their next owner learns its own): while any is kept, every message
        sent is looked up (``_identity``, about 2 us for an alert)."""
        if not self.refused:
            return
        assigned = self.consumer.assignment()
        for ident in [i for i in self.refused if i[1] is not None]:
            _, src_topic, src_partition, src_offset = ident
            tp = TopicPartition(src_topic, src_partition)
            end = offsets.get(tp)
            if (end is not None and src_offset < end) or tp not in assigned:
                del self.refused[ident]

    def _abort(self, batch: InFlight, e: Exception, counted: bool = True, refused: int = 0) -> None:
        self.aborted_batches += 1
        if counted:
            self._aborts_in_a_row += 1
        if self.metrics is not None:
            self.metrics.commits.labels("aborted").inc()
            self.metrics.delivery_errors.inc(sum(1 for s in batch.sends if not s.ok()))
        log.warning({"event": "transaction_aborted", "messages": len(batch.sends), "error": repr(e),
                     "attempt": self._aborts_in_a_row, "refused": refused,
                     "effect": "nothing of the batch is visible; it is read again"
                               + ("" if counted else ", the refused messages as their fallback records")})
        try:
            self._bounded("abort_transaction", self.producer.abort_transaction)
        except KafkaError as abort_error:
            if self._fatal(abort_error):
                raise self._fenced(abort_error) from None
            raise DeliveryError(f"the transaction could not be aborted ({abort_error!r}); offsets not committed") from None
        finally:
            self._open = False
        if self._aborts_in_a_row > self.resend_attempts:
            raise DeliveryError(f"{self._aborts_in_a_row} transactions in a row aborted (last: {e!r}); offsets not committed")

    def _bounded(self, what: str, call, *args) -> None:
        """Step 7: ``call(*args)`` on a helper thread, waited for at most ``delivery_timeout_s``. A thread rather
        than kafka-python's private result objects; a daemon, so a call that never returns cannot hold up the exit."""
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                call(*args)
                outcome.append(None)
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                outcome.append(e)

        helper = threading.Thread(target=run, name=f"kdsm-{what}", daemon=True)
        helper.start()
        helper.join(self.delivery_timeout_s)
        if not outcome:
            raise Unresolved(f"the broker did not answer {what} within {self.delivery_timeout_s:g} s "
                             f"(kafka.delivery_timeout_s) for transactional id {self.transactional_id!r}: the "
                             "transaction's outcome is unknown; stopping; a restart settles it (init_transactions)")
        if outcome[0] is not None:
            raise outcome[0]

    def _fatal(self, e: Exception) -> bool:
        """A fatal transactional error (fenced, epoch, authorisation): the producer can do nothing more.
        kafka-python raises some as a plain KafkaError ('... in an error state: ProducerFencedError'),
        hence the look at its transaction manager's state."""
        if isinstance(e, _FATAL):
            return True
        manager = getattr(self.producer, "_transaction_manager", None)
        return bool(manager is not None and manager.has_fatal_error())

    def _fenced(self, e: Exception) -> DeliveryError:
        manager = getattr(self.producer, "_transaction_manager", None)
        cause = e if isinstance(e, _FATAL) else (manager.last_error if manager is not None else e)
        if isinstance(cause, (ProducerFencedError, InvalidProducerEpochError)):
            return Fenced(f"fenced: another producer with transactional id {self.transactional_id!r} took over "
                          "(kafka.transactional_id); this instance stops, its open transaction is aborted")
        return DeliveryError(f"fatal transactional error for transactional id {self.transactional_id!r}: {cause!r}; "
                             "offsets not committed")


_REFUSED_KEPT = 10_000  # refused messages remembered at most (each a few hundred bytes)


class _Source(msgspec.Struct):
    topic: str
    partition: int
    offset: int


class _Sourced(msgspec.Struct):
    source: _Source | None = None


_decode_source = msgspec.json.Decoder(_Sourced).decode


def _identity(topic: str, key: bytes | None, value: bytes) -> tuple:
    """What a message is sent for, the same however often its batch is read again: its destination topic and its
    event (the top-level ``source`` every alert and dead letter carries; an alert's ``scored_at`` and a dead
    letter's ``dead_at`` change from one read to the next); for a message without one, its key and digest."""
    try:
        src = _decode_source(value).source
    except (msgspec.DecodeError, TypeError):
        src = None
    if src is not None:
        return (topic, src.topic, src.partition, src.offset)
    return (topic, None, key, hashlib.sha256(value).hexdigest())


def _source_of(ident: tuple) -> dict | None:
    return None if ident[1] is None else {"topic": ident[1], "partition": ident[2], "offset": ident[3]}


def _first_per_error(sends) -> list[Send]:
    """Of sends in the order they failed, the first to fail with each exception object."""
    seen: set[int] = set()
    first = []
    for s in sends:
        if id(s.future.exception) not in seen:
            seen.add(id(s.future.exception))
            first.append(s)
    return first


_REFUSED_FOR_CONTENT = (  # errors about the record itself, which no retry changes (kafka.errors of kafka-python 3.0.12)
    MessageSizeTooLargeError,  # the broker's MESSAGE_TOO_LARGE, and the producer's own check before the send
    RecordListTooLargeError,
    InvalidRecordError,
    CorruptRecordError,
    InvalidTimestampError,
)


def _refused_for_itself(e: BaseException | None) -> bool:
    """The broker's (or the producer's own size check's) refusal of this record for its content, which no retry
    changes: an allow-list. Not a retriable error, nor a plain ``KafkaError``/``IllegalStateError`` about the
    transaction's state, nor any other non-retriable broker error (about the producer, its sequence or epoch, its
    permissions: ``TopicAuthorizationFailedError``, ``OutOfOrderSequenceNumberError``...): replacing the record by its
    fallback would not help, and those aborts count toward ``resend_attempts``."""
    return isinstance(e, _REFUSED_FOR_CONTENT)


def _retriable(s: Send) -> bool:
    """A refusal that may pass on a retry (timeouts, leader moves), unlike one for what the message is (too large).
    Asked of failed sends only: a pending one is waited for, never re-sent (``_await_answers``)."""
    return bool(getattr(s.future.exception, "retriable", False))
