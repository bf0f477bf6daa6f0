"""A transaction-aware reader for the exactly-once tests: what a ``read_committed`` consumer sees on Apache Kafka.

Tansu 0.6.0 (the dev broker) writes the commit and abort markers, but its Fetch
responses carry no ``aborted_transactions`` list, so a kafka-python
``read_committed`` consumer there also returns the records of aborted
transactions (README, Tansu quirks). This reader reads the whole log with
kafka-python (``read_uncommitted``), notes every record batch's producer id,
transactional flag and control marker on the way, and then keeps what a
``read_committed`` consumer keeps on Apache Kafka: non-transactional records
and records of transactions that ended with a COMMIT marker. Records of
aborted transactions and of transactions still open are left out (and
counted). Read after the writers are done: it judges the log as it stands.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import Fetcher
from kafka.record import MemoryRecords

_observers: list = []
_lock = threading.Lock()


@contextmanager
def _observe_batches(sink: list):
    """Every record batch kafka-python parses in this process goes to ``sink`` while the block runs."""
    original = Fetcher.PartitionRecords.__init__

    def init(self, fetch_offset, tp, records, *args, **kwargs):
        batches = MemoryRecords(records._buffer)
        while batches.has_next():
            b = batches.next_batch()
            control = None
            if getattr(b, "is_control_batch", False):
                control = "abort" if next(iter(b)).abort else "commit"
            sink.append((tp, b.base_offset, b.last_offset, b.producer_id if b.magic >= 2 else -1,
                         bool(getattr(b, "is_transactional", False)), control))
        original(self, fetch_offset, tp, records, *args, **kwargs)

    with _lock:
        Fetcher.PartitionRecords.__init__ = init
        try:
            yield
        finally:
            Fetcher.PartitionRecords.__init__ = original


@dataclass
class CommittedView:
    records: list = field(default_factory=list)  # ConsumerRecords a read_committed consumer returns on Apache Kafka
    aborted: int = 0  # records of aborted transactions (Tansu hands these to read_committed consumers)
    open: int = 0  # records of transactions with no marker yet


def read_committed(bootstrap: str, topic: str, partitions: int, timeout: float = 20.0, idle: float = 2.0) -> CommittedView:
    """Every record of ``topic`` that belongs to a committed transaction or to no transaction."""
    batches: list = []
    got = []
    with _observe_batches(batches):
        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                          isolation_level="read_uncommitted")
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            c.assign(tps)
            c.seek_to_beginning()
            end = c.end_offsets(tps)
            deadline, quiet = time.monotonic() + timeout, time.monotonic() + idle
            while time.monotonic() < deadline:
                recs = c.poll(timeout_ms=200)
                for rs in recs.values():
                    got.extend(rs)
                if recs:
                    quiet = time.monotonic() + idle
                # Tansu's ListOffsets can name an end below records it serves (seen: 5001 for 5050 records after a
                # SIGSTOP and SIGCONT of the broker), so reaching it ends the read only once a poll brings nothing.
                done = all(c.position(tp) >= end[tp] for tp in tps) and not recs
                if done or time.monotonic() > quiet:
                    break
        finally:
            c.close()
    verdict = _verdict(batches)
    view = CommittedView()
    for r in got:
        v = verdict.get((r.topic, r.partition, r.offset), "plain")
        if v in ("plain", "commit"):
            view.records.append(r)
        elif v == "abort":
            view.aborted += 1
        else:
            view.open += 1
    return view


def _verdict(batches: list) -> dict:
    """(topic, partition, offset) -> 'commit' / 'abort' / 'open' for transactional records."""
    out = {}
    by_producer = defaultdict(dict)
    for tp, base, last, pid, transactional, control in batches:
        if transactional or control:
            by_producer[(tp, pid)][base] = (last, control)  # a batch fetched twice counts once
    for (tp, _), seen in by_producer.items():
        pending = []
        for base in sorted(seen):
            last, control = seen[base]
            if control is None:
                pending.append((base, last))
                continue
            for lo, hi in pending:
                for off in range(lo, hi + 1):
                    out[(tp.topic, tp.partition, off)] = control
            pending = []
        for lo, hi in pending:
            for off in range(lo, hi + 1):
                out[(tp.topic, tp.partition, off)] = "open"
    return out
