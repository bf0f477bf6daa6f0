"""Micro-batches: what one poll returns (``RecordBatch``) and what a scored batch hands to sinks (``ScoredBatch``).

``poll_batch`` polls up to ``max_batch`` records or ``max_wait_ms``,
whichever comes first, and flattens them into column arrays so the rest of
the pipeline works on arrays, not on record objects.

>>> b = RecordBatch.from_records([])
>>> len(b), b.commit_offsets()
(0, {})
"""

from __future__ import annotations

import logging
import operator
import time
from dataclasses import dataclass
from typing import NamedTuple

import msgspec
import numpy as np
from kafka.errors import CorruptRecordError
from kafka.structs import TopicPartition

log = logging.getLogger("kdsm.stream")
_headers = operator.attrgetter("headers")
_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(list[tuple[str, bytes | None]]).decode


@dataclass
class RecordBatch:
    """Polled records as columns; ``values`` are the raw bytes (None for tombstones).

    ``headers`` holds each record's Kafka headers ((name, value) pairs), or is None when no record of the batch
    has any: the common case then carries no per-record column (through the fetch process's pipe either). From
    the fetch process each record's headers come packed (``packed_headers``): read them with ``headers_at``, which
    unpacks only the few records that need them (dead letters), not every record of a traced stream (unpacking the
    column took 0.5 us a record, a tenth of the loop's time per record).
    """

    topics: list[str]
    partitions: np.ndarray  # int32
    offsets: np.ndarray  # int64
    timestamps_ms: np.ndarray  # int64, the Kafka record timestamps
    keys: list
    values: list
    polled_at: float  # time.time() when the poll returned
    headers: list | None = None
    # Rows standing for records kafka-python could not read ({row: the error}; None when none): see ``Unreadable``.
    unreadable: dict | None = None

    @classmethod
    def from_records(cls, records: list) -> RecordBatch:
        values = [r.value for r in records]
        return cls(topics=[r.topic for r in records],
                   partitions=np.fromiter((r.partition for r in records), np.int32, len(records)),
                   offsets=np.fromiter((r.offset for r in records), np.int64, len(records)),
                   timestamps_ms=np.fromiter((r.timestamp if r.timestamp is not None else -1 for r in records), np.int64, len(records)),
                   keys=[r.key for r in records], values=values, polled_at=time.time(),
                   headers=list(map(_headers, records)) if any(map(_headers, records)) else None,
                   # an unreadable record's value is None: only a batch with a tombstone or one is looked at
                   unreadable=({i: r.error for i, r in enumerate(records) if type(r) is Unreadable} or None)
                   if None in values else None)

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def concat(cls, parts: list[RecordBatch]) -> RecordBatch:
        """One batch of several, in order (the fetch process's frames gathered into a micro-batch).

        >>> a = RecordBatch(["t"], np.array([0], np.int32), np.array([4]), np.array([1]), [None], [b"a"], 1.0)
        >>> b = RecordBatch.concat([a, a.take(0, 0), a])
        >>> len(b), b.offsets.tolist(), b.values, b.polled_at, b.headers
        (2, [4, 4], [b'a', b'a'], 1.0, None)
        >>> h = RecordBatch(["t"], np.array([0], np.int32), np.array([5]), np.array([1]), [None], [b"h"], 1.0, [[("trace", b"t")]])
        >>> RecordBatch.concat([a, h]).headers  # one part with headers: then every row has its own
        [(), [('trace', b't')]]
        >>> u = RecordBatch.from_records([Unreadable("t", 0, 6, "CorruptRecordError('x')")])
        >>> c = RecordBatch.concat([a, u, a, u])
        >>> c.unreadable, c.values, c.take(2, 4).unreadable, c.take(0, 1).unreadable
        ({1: "CorruptRecordError('x')", 3: "CorruptRecordError('x')"}, [b'a', None, b'a', None], {1: "CorruptRecordError('x')"}, None)
        """
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.from_records([])
        return cls(topics=[t for p in parts for t in p.topics], partitions=np.concatenate([p.partitions for p in parts]),
                   offsets=np.concatenate([p.offsets for p in parts]),
                   timestamps_ms=np.concatenate([p.timestamps_ms for p in parts]),
                   keys=[k for p in parts for k in p.keys], values=[v for p in parts for v in p.values],
                   polled_at=parts[-1].polled_at,
                   headers=None if all(p.headers is None for p in parts) else
                   [h for p in parts for h in (p.headers if p.headers is not None else [()] * len(p))],
                   unreadable=_shifted(parts))

    def take(self, start: int, stop: int) -> RecordBatch:
        """Records ``start`` to ``stop`` (a slice, in order)."""
        return RecordBatch(self.topics[start:stop], self.partitions[start:stop], self.offsets[start:stop],
                           self.timestamps_ms[start:stop], self.keys[start:stop], self.values[start:stop], self.polled_at,
                           None if self.headers is None else self.headers[start:stop],
                           None if not self.unreadable else
                           {i - start: e for i, e in self.unreadable.items() if start <= i < stop} or None)

    def headers_at(self, i: int):
        """Record ``i``'s headers ((name, value) pairs; empty when it has none), unpacked if packed.

        >>> rb = RecordBatch(["t", "t"], np.array([0, 0], np.int32), np.array([5, 6]), np.array([1, 1]), [None, None],
        ...                  [b"h", b"i"], 1.0, [[("trace", b"t"), ("n", None)], []])
        >>> rb.headers = rb.packed_headers()
        >>> rb.headers[1], rb.headers_at(0), rb.headers_at(1)
        (None, [('trace', b't'), ('n', None)], ())
        """
        h = () if self.headers is None else self.headers[i]
        return _unpack(h) if isinstance(h, bytes) else h or ()

    def packed_headers(self) -> list | None:
        """The headers column with each record's headers packed (MessagePack bytes; None where it has none), as the
        fetch process sends it: one bytes object a record for the streamer to receive, not a list of lists."""
        return None if self.headers is None else [h if isinstance(h, bytes) else _pack(h) if h else None
                                                   for h in self.headers]

    def commit_offsets(self) -> dict[TopicPartition, int]:
        """Next offset to consume per partition (last offset + 1), the value a commit stores.

        Vectorised per topic and partition (no per-record Python work: this runs on every batch).

        >>> b = RecordBatch(["a", "b", "a", "a"], np.array([0, 0, 1, 0], np.int32), np.array([5, 9, 2, 7]),
        ...                 np.zeros(4, np.int64), [None] * 4, [b""] * 4, 0.0)
        >>> sorted((tp.topic, tp.partition, o) for tp, o in b.commit_offsets().items())
        [('a', 0, 8), ('a', 1, 3), ('b', 0, 10)]
        """
        return self._per_partition(last=True)

    def first_offsets(self) -> dict[TopicPartition, int]:
        """First offset per partition: where the batch is read again from if it is never committed.

        >>> b = RecordBatch(["a", "b", "a", "a"], np.array([0, 0, 1, 0], np.int32), np.array([5, 9, 2, 7]),
        ...                 np.zeros(4, np.int64), [None] * 4, [b""] * 4, 0.0)
        >>> sorted((tp.topic, tp.partition, o) for tp, o in b.first_offsets().items())
        [('a', 0, 5), ('a', 1, 2), ('b', 0, 9)]
        """
        return self._per_partition(last=False)

    def _per_partition(self, last: bool) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        topics = set(self.topics)
        for t in topics:
            if len(topics) == 1:
                parts, offs = self.partitions, self.offsets
            else:
                sel = np.fromiter((x == t for x in self.topics), bool, len(self.topics))
                parts, offs = self.partitions[sel], self.offsets[sel]
            for p in np.unique(parts).tolist():
                mine = offs[parts == p]
                out[TopicPartition(t, p)] = int(mine.max()) + 1 if last else int(mine.min())
        return out


def _shifted(parts: list[RecordBatch]) -> dict | None:
    """The parts' unreadable rows, numbered in their concatenation."""
    out, at = {}, 0
    for p in parts:
        if p.unreadable:
            out.update((i + at, e) for i, e in p.unreadable.items())
        at += len(p)
    return out or None


class Unreadable(NamedTuple):
    """A record kafka-python could not read (``CorruptRecordError``: a header name that is not UTF-8, say), in place
    of its ``ConsumerRecord``: its row has no key, value, timestamp or headers, and goes to the dead-letter topic as
    ``corrupt_record`` with the error (``StreamApp._prepare``), so it is committed after its dead letter is
    acknowledged, as any bad event."""

    topic: str
    partition: int
    offset: int
    error: str
    key: None = None
    value: None = None
    timestamp: None = None
    headers: tuple = ()


def poll_records(consumer, max_records: int, timeout_ms: int, records: list) -> None:
    """One ``consumer.poll``, its records appended to ``records``; a record kafka-python cannot read is appended as
    an ``Unreadable`` and the consumer seeks past it.

    kafka-python raises ``CorruptRecordError`` at the record (after returning those before it) and leaves the
    partition's position on it, so every later poll would raise again: a poison pill no restart gets past. The
    partition is the one whose records kafka-python was returning (its fetcher's, private: the error does not name
    it), or the only one fetchable; if neither names one, the error is raised as before.
    """
    try:
        got = consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
    except CorruptRecordError as e:
        tp = _failed_partition(consumer)
        if tp is None:
            raise
        offset = consumer.position(tp)
        error = (f"kafka-python could not read the record, or an earlier record of its record batch (it reads a batch "
                 f"from its start), so it has no payload here; it is still in {tp.topic}[{tp.partition}]: {e}")
        log.error({"event": "corrupt_record", "partition": f"{tp.topic}:{tp.partition}", "offset": offset,
                   "error": str(e), "effect": "dead-lettered (corrupt_record); reading on after it"})
        consumer.seek(tp, offset + 1)
        records.append(Unreadable(tp.topic, tp.partition, offset, error))
        return
    for recs in got.values():
        records.extend(recs)


def _failed_partition(consumer) -> TopicPartition | None:
    part = getattr(getattr(consumer, "_fetcher", None), "_next_partition_records", None)
    tp = getattr(part, "topic_partition", None)
    if tp is not None and tp in consumer.assignment():
        return tp
    fetchable = consumer.assignment() - consumer.paused()
    return next(iter(fetchable)) if len(fetchable) == 1 else None


def poll_batch(consumer, max_batch: int, max_wait_ms: int, gathered: list | None = None) -> RecordBatch:
    """Poll until ``max_batch`` records or ``max_wait_ms`` have passed; may return an empty batch.

    ``gathered`` collects the records as they arrive: a rebalance listener running inside a later
    ``consumer.poll`` takes them from there (and empties it), so they are finished before their
    partitions go instead of being scored after another member re-read them.
    """
    records: list = gathered if gathered is not None else []
    deadline = time.monotonic() + max_wait_ms / 1000.0
    while True:
        left_ms = max(0, int((deadline - time.monotonic()) * 1000))
        poll_records(consumer, max_batch - len(records), left_ms, records)
        if len(records) >= max_batch or time.monotonic() >= deadline:
            break
    batch = RecordBatch.from_records(records)
    records.clear()
    return batch


@dataclass
class ScoredBatch:
    """A batch after scoring, as sinks see it once its offsets are committed (valid rows only).

    Sinks (archive, drift, ...) get this from ``on_committed``; arrays are aligned by row.
    """

    topics: list[str]
    partitions: np.ndarray
    offsets: np.ndarray
    timestamps_ms: np.ndarray  # Kafka record timestamps
    event_ids: list
    event_ts: list  # the events' own timestamps (None where absent)
    X: np.ndarray  # (n, d) float64 raw features, in the model's feature order
    scores: np.ndarray
    severities: np.ndarray  # '' / 'warning' / 'critical'
    model_version: str
    schema_hash: str
    feature_names: list[str]
    thresholds: dict[str, float]
    n_dead_letters: int = 0
    committed_at: float | None = None

    def __len__(self) -> int:
        return len(self.scores)
