"""The commit order, in one place: publish, wait for the broker's acks, then commit offsets.

At-least-once (DESIGN 6) rests on this order for every batch:

1. every alert and dead letter of the batch is handed to the producer
   (``send``), which batches them (linger_ms / batch_size) and ships them
   with acks=all;
2. before a batch's offsets are committed, every one of its futures must be
   acknowledged: ``retire`` checks without blocking, ``drain`` flushes the
   producer (one flush covers every batch in flight) and waits;
3. a send the broker refused is re-sent (``resend_attempts`` times) and the
   batch is not committed until it is acknowledged; if it never is,
   ``DeliveryError`` stops the streamer *without* committing, so a restart
   re-reads the batch (duplicates, never loss);
4. only then are the offsets (last offset + 1 per partition) committed,
   synchronously, for the oldest batches first; a commit refused because the
   partitions moved to another member is logged and counted: the new owner
   re-reads those events (bounded duplicates);
5. sinks see a batch only after its commit succeeded.

A crash between 1 and 4 leaves the offsets where they were: the events come
back and are scored again, so duplicates are bounded by the batches in
flight (``stream.max_in_flight``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from .batch import ScoredBatch

log = logging.getLogger("kdsm.checkpoint")


class DeliveryError(RuntimeError):
    """The broker did not acknowledge an alert or dead letter; offsets were not committed."""


@dataclass
class InFlight:
    """One published batch waiting for its acks and its commit."""

    offsets: dict[TopicPartition, int]
    scored: ScoredBatch | None
    timestamps_ms: list[int]  # sampled Kafka timestamps, for the end-to-end latency metric
    sends: list = field(default_factory=list)  # (topic, key, value, future)

    def acked(self) -> bool:
        return all(f.is_done for *_, f in self.sends)


class Checkpointer:
    def __init__(self, consumer, producer, metrics=None, delivery_timeout_s: float = 30.0, resend_attempts: int = 3):
        self.consumer, self.producer, self.metrics = consumer, producer, metrics
        self.delivery_timeout_s, self.resend_attempts = delivery_timeout_s, resend_attempts
        self.in_flight: deque[InFlight] = deque()
        self.committed_batches = 0
        self.failed_commits = 0

    def send(self, batch: InFlight, topic: str, key: bytes | None, value: bytes):
        """Hand one message to the producer; returns its future (resolved by the broker's ack)."""
        fut = self.producer.send(topic, key=key, value=value)
        batch.sends.append((topic, key, value, fut))
        return fut

    def add(self, batch: InFlight) -> None:
        self.in_flight.append(batch)
        self._gauge()

    def retire(self) -> list[ScoredBatch]:
        """Commit the oldest batches whose sends are all acknowledged (no waiting)."""
        ready = []
        while self.in_flight and self.in_flight[0].acked():
            ready.append(self.in_flight.popleft())
        return self._commit(ready)

    def drain(self) -> list[ScoredBatch]:
        """Flush the producer, wait for every ack, commit every batch in flight (rebalance, shutdown, backpressure)."""
        if not self.in_flight:
            return []
        self.producer.flush(timeout=self.delivery_timeout_s)
        ready = list(self.in_flight)
        self.in_flight.clear()
        return self._commit(ready)

    # ------------------------------------------------------------------ internals
    def _ensure_acked(self, batch: InFlight) -> None:
        for attempt in range(self.resend_attempts + 1):
            failed = [(t, k, v, f) for t, k, v, f in batch.sends if not f.is_done or f.failed()]
            pending = [s for s in failed if not s[3].is_done]
            if pending:
                self.producer.flush(timeout=self.delivery_timeout_s)
                failed = [(t, k, v, f) for t, k, v, f in batch.sends if not f.is_done or f.failed()]
            if not failed:
                return
            if self.metrics is not None:
                self.metrics.delivery_errors.inc(len(failed))
            err = next((f.exception for *_, f in failed if f.is_done), None)
            log.warning({"event": "delivery_failed", "messages": len(failed), "attempt": attempt + 1, "error": str(err)})
            if attempt == self.resend_attempts:
                break
            time.sleep(min(2.0, 0.2 * 2**attempt))
            keep = [s for s in batch.sends if s[3].is_done and s[3].succeeded()]
            for t, k, v, _ in failed:
                keep.append((t, k, v, self.producer.send(t, key=k, value=v)))
            batch.sends = keep
        raise DeliveryError(f"{len(failed)} alert/dead-letter message(s) were not acknowledged by the broker; offsets not committed")

    def _commit(self, batches: list[InFlight]) -> list[ScoredBatch]:
        if not batches:
            return []
        for b in batches:
            self._ensure_acked(b)  # step 2-3: nothing is committed before its messages are acked
        offsets: dict[TopicPartition, int] = {}
        for b in batches:  # oldest first: a later batch's offset supersedes an earlier one
            for tp, off in b.offsets.items():
                offsets[tp] = max(off, offsets.get(tp, -1))
        done = []
        if offsets:
            try:
                self.consumer.commit({tp: OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()})
            except KafkaError as e:
                # The partitions moved (rebalance) or the coordinator is gone: the events come back elsewhere.
                self.failed_commits += 1
                if self.metrics is not None:
                    self.metrics.commits.labels("failed").inc()
                log.warning({"event": "commit_failed", "batches": len(batches), "error": repr(e),
                             "effect": "these events will be re-delivered (at least once)"})
                self._gauge()
                return []
        now = time.time()
        self.committed_batches += len(batches)
        if self.metrics is not None:
            self.metrics.commits.labels("ok").inc()
            self.metrics.last_commit.set(now)
            for b in batches:
                for ts in b.timestamps_ms:
                    if ts > 0:
                        self.metrics.e2e_seconds.observe(max(0.0, now - ts / 1000.0))
        for b in batches:
            if b.scored is not None:
                b.scored.committed_at = now
                done.append(b.scored)
        self._gauge()
        return done

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.in_flight.set(len(self.in_flight))
