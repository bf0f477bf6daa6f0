"""The fetch process (``stream.fetch_process``): kafka-python's fetching and record unpacking in a child process.

kafka-python unpacks records in Python, under the one GIL the loop also needs for decoding, alert encoding,
publishing and committing: on ``kdsm bench stream --scorer none`` the unpacking is most of consume-only's time,
and the loop's own work adds to it instead of overlapping (docs/streaming.md, "The fetch process"). With
``stream.fetch_process: true`` the records are fetched and unpacked by a second interpreter:

- **the streamer's consumer stays the group member.** It joins, is assigned partitions, runs the rebalance
  listener, commits offsets (under exactly once: sends them in each transaction), exactly as without the fetch
  process, but keeps every assigned partition paused, so it fetches nothing;
- **the child** (``python -m streamer.pipeline.fetcher``) runs a consumer without a group, assigned the same
  partitions at the offsets the streamer names, and sends what each of its polls returns (at most
  ``stream.max_batch`` records) as columns over its stdout, at once;
- **the loop gathers** frames into a micro-batch as it gathers polls without the fetch process: up to
  ``stream.max_batch`` records or ``stream.max_wait_ms`` (20 ms while a batch is being scored), so batch sizes and
  latency follow the same rule; a frame that overfills the batch is split and its rest starts the next one;
- **epochs.** Every assignment the streamer sends (after a rebalance, after an aborted transaction's rewind)
  carries a new epoch, and every batch the epoch it was fetched under; the streamer drops a batch of an older
  epoch. So it scores only records of partitions it owns, from the offsets it asked for.

Frames are msgspec MessagePack in ``multiprocessing.connection`` length-prefixed messages over the child's
stdin (setup, then assignments) and stdout (batches); nothing is pickled. The records' Kafka headers travel as one
more column: a nil when none of them has any (the common case: one byte a frame), else each record's headers packed
by the child (``RecordBatch.packed_headers``), unpacked by the streamer only for a dead letter or an alert that
forwards them (``stream.alert_headers``); then the records the child could not read (``batch.Unreadable``: their
rows and errors; nil when none), which the streamer dead-letters. The child ignores SIGINT and SIGTERM (a Ctrl-C,
systemd's stop or ``kill -TERM -PGID`` reach the whole process group; the streamer decides when to stop, and
drains first) and exits when its stdin closes, so it never outlives the streamer. If the child exits, the streamer stops with one line (``FetchProcessExited``,
exit 1): nothing it had not yet received was committed.

>>> rb = RecordBatch(["t", "t"], np.array([0, 1], np.int32), np.array([5, 9]), np.array([1, 2]), [None, b"k"],
...                  [b"{}", None], 12.5, [[], [("trace", b"t1"), ("n", None)]])
>>> epoch, back = unpack_batch(pack_batch(3, rb))
>>> epoch, back.topics, back.partitions.tolist(), back.offsets.tolist(), back.keys, back.values, back.headers_at(1)
(3, ['t', 't'], [0, 1], [5, 9], [None, b'k'], [b'{}', None], [('trace', b't1'), ('n', None)])
>>> rb.unreadable = {1: "CorruptRecordError('x')"}  # a record the child could not read (batch.Unreadable)
>>> unpack_batch(pack_batch(3, rb))[1].unreadable
{1: "CorruptRecordError('x')"}
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from types import SimpleNamespace

import msgspec
import numpy as np
from kafka.structs import TopicPartition
from pydantic import SecretStr

from .batch import RecordBatch, poll_records
from .checkpoint import DeliveryError
from .kafka_clients import KafkaStartError

log = logging.getLogger("kdsm.stream")

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode
_CLOSE_WAIT_S = 5.0
_CHILD_POLL_MS = 50  # the child's longest poll: how soon it sees a new assignment while idle
_PIPE_BYTES = 1 << 20  # Linux's default pipe-max-size; 64 KiB (the default) is half a batch of 2000 events


def pack_batch(epoch: int, rb: RecordBatch) -> bytes:
    """One frame: the batch's columns (topics as a name table and per-record indices when they differ)."""
    names = sorted(set(rb.topics))
    index = {t: i for i, t in enumerate(names)}
    codes = b"" if len(names) == 1 else np.fromiter((index[t] for t in rb.topics), np.uint16, len(rb)).tobytes()
    return _encode((epoch, names, codes, rb.partitions.astype(np.int32).tobytes(), rb.offsets.astype(np.int64).tobytes(),
                    rb.timestamps_ms.astype(np.int64).tobytes(), rb.keys, rb.values, rb.polled_at, rb.packed_headers(),
                    None if not rb.unreadable else list(rb.unreadable.items())))


def unpack_batch(frame: bytes) -> tuple[int, RecordBatch]:
    epoch, names, codes, parts, offs, ts, keys, values, polled_at, headers, unreadable = _decode(frame)
    topics = names * len(values) if len(names) == 1 else [names[i] for i in np.frombuffer(codes, np.uint16).tolist()]
    return epoch, RecordBatch(topics=topics, partitions=np.frombuffer(parts, np.int32),
                              offsets=np.frombuffer(offs, np.int64), timestamps_ms=np.frombuffer(ts, np.int64),
                              keys=keys, values=values, polled_at=polled_at, headers=headers,
                              unreadable=None if unreadable is None else dict(map(tuple, unreadable)))


# The child's last frame when the broker refuses what it fetches (an ACL on the events topic): this prefix, then the
# error as UTF-8 text. A batch frame is a msgpack array and never starts with a zero byte.
_REFUSAL = b"\x00refused\x00"


class FetchProcessExited(DeliveryError):
    """The fetch process is gone (a broker it could not reach, a crash, a kill): the streamer stops; what it had
    not received was not committed, so a restart reads it again."""

    event = "fetch_process_exited"


class FetchProcessRefused(KafkaStartError):
    """The broker refused what the fetch process fetches (an ACL on the events topic): one line, exit 2."""

    def __init__(self, bootstrap: str, topic: str, error: str):
        ConnectionError.__init__(self, f"Kafka at {bootstrap}: fetching {topic} (the fetch process) failed: {error}")


class FetchProcess:
    """The streamer's side: start the child, tell it what to fetch from where, take its batches."""

    def __init__(self, kafka, max_batch: int, isolation_level: str = "read_uncommitted"):
        self._setup = {"kafka": {n: (v.get_secret_value() if isinstance(v, SecretStr) else v)
                                 for n, v in kafka.model_dump().items()},
                       "max_batch": max_batch, "isolation_level": isolation_level,
                       "log_level": logging.getLevelName(logging.getLogger("kdsm").getEffectiveLevel())}
        self.epoch = 0
        self.dropped = 0  # frames of an older epoch, dropped (tests read it)
        self._lock = threading.Lock()  # assignments come from the loop and from the rebalance listener's thread
        self._rest: tuple[int, RecordBatch] | None = None  # (epoch, records) of a frame split at max_batch
        self._proc: subprocess.Popen | None = None
        self._commands: Connection | None = None
        self._batches: Connection | None = None

    def start(self) -> FetchProcess:
        # stderr is the streamer's: the child's log lines go where the streamer's go.
        self._proc = subprocess.Popen([sys.executable, "-m", "streamer.pipeline.fetcher"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, close_fds=True)
        self._commands = Connection(os.dup(self._proc.stdin.fileno()), readable=False)
        self._batches = Connection(os.dup(self._proc.stdout.fileno()), writable=False)
        with contextlib.suppress(OSError):  # room for a few batches, so the child fetches on while the loop waits for acks
            fcntl.fcntl(self._batches.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        self._proc.stdin.close()
        self._proc.stdout.close()
        self._send(self._setup)
        log.info({"event": "fetch_process_started", "pid": self._proc.pid})
        return self

    def assign(self, offsets: dict[TopicPartition, int | None]) -> None:
        """Fetch these partitions from these offsets (None: the group's ``auto_offset_reset``) under a new epoch;
        an empty dict stops fetching. Batches fetched before are dropped when they arrive."""
        with self._lock:
            self.epoch += 1
            self._send(("assign", self.epoch, [[tp.topic, tp.partition, off] for tp, off in offsets.items()]))

    def next_batch(self, max_batch: int, wait_ms: int) -> RecordBatch:
        """Records of the current epoch until ``max_batch`` or ``wait_ms`` (``poll_batch``'s rule); may be empty."""
        deadline = time.monotonic() + wait_ms / 1000.0
        parts, n = [], 0
        if self._rest is not None:
            (epoch, rest), self._rest = self._rest, None
            if epoch == self.epoch:
                parts.append(rest)
                n = len(rest)
        while n < max_batch:
            try:
                if not self._batches.poll(max(0.0, deadline - time.monotonic())):
                    break
                frame = self._batches.recv_bytes()
            except (EOFError, OSError):
                raise self._exited() from None
            if frame.startswith(_REFUSAL):
                self._reap()
                raise self._refused(frame)
            epoch, rb = unpack_batch(frame)
            if epoch != self.epoch:
                self.dropped += 1
                continue
            parts.append(rb)
            n += len(rb)
        if n > max_batch:
            last = parts[-1]
            keep = len(last) - (n - max_batch)
            parts[-1], self._rest = last.take(0, keep), (self.epoch, last.take(keep, len(last)))
        return RecordBatch.concat(parts)

    def close(self) -> None:
        """Close the child's stdin (it exits), wait a little, then kill it."""
        for conn in (self._commands, self._batches):
            if conn is not None:
                conn.close()
        if self._proc is not None:
            self._reap()

    def _send(self, msg) -> None:
        try:
            self._commands.send_bytes(_encode(msg))
        except OSError:
            raise self._exited() from None

    def _reap(self) -> int:
        """The child's exit code: waited for a little, then killed (a pipe can break under a child still running)."""
        try:
            return self._proc.wait(_CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            return self._proc.wait()

    def _exited(self) -> FetchProcessExited | FetchProcessRefused:
        """Why the child is gone: its refusal, where its last frame is one still in the pipe (a command sent before
        the batches were read meets the closed pipe first), else its exit."""
        code = self._reap()
        with contextlib.suppress(EOFError, OSError):
            while self._batches is not None and self._batches.poll(0):
                frame = self._batches.recv_bytes()
                if frame.startswith(_REFUSAL):
                    return self._refused(frame)
        return FetchProcessExited(f"the fetch process exited (code {code}); its log lines are above")

    def _refused(self, frame: bytes) -> FetchProcessRefused:
        return FetchProcessRefused(self._setup["kafka"]["bootstrap"], self._setup["kafka"]["events_topic"],
                                   frame[len(_REFUSAL):].decode("utf-8", "replace"))


def _assign(consumer, msg) -> int:
    _, epoch, parts = msg
    tps = [TopicPartition(t, p) for t, p, _ in parts]
    consumer.assign(tps)
    for (t, p, off) in parts:
        if off is not None:
            consumer.seek(TopicPartition(t, p), off)
    return epoch


def main() -> int:
    """The child: read the setup, then fetch what the streamer assigns until its stdin closes."""
    # A signal to the process group is the streamer's to act on: killed by it, the child ended the stream (exit 1,
    # the batch being gathered not committed) while the streamer meant to drain and exit 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    batches = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # nothing but batches on the batch pipe, whatever a library prints
    commands = Connection(os.dup(0), writable=False)
    from .kafka_clients import REFUSED, KafkaUnavailable, describe, make_consumer, settings_hint
    from .logs import setup_logging

    try:
        setup = _decode(commands.recv_bytes())
    except EOFError:
        return 0
    setup_logging(setup["log_level"])
    # The streamer's kafka settings, validated there; secrets travel in clear over the pipe, never on a command line.
    k = SimpleNamespace(**{n: SecretStr(v) if n == "sasl_password" and v is not None else v
                           for n, v in setup["kafka"].items()})
    try:
        consumer = make_consumer(k, grouped=False, isolation_level=setup["isolation_level"])
    except KafkaUnavailable as e:
        log.error({"event": "fetch_process_stopped", "error": str(e)})
        return 2
    epoch = 0
    try:
        while True:
            while commands.poll():
                epoch = _assign(consumer, _decode(commands.recv_bytes()))
            if not consumer.assignment():
                commands.poll(0.2)  # nothing to fetch: wait for an assignment (or the streamer's exit)
                continue
            got: list = []  # a record kafka-python cannot read comes as a batch.Unreadable, and is skipped
            poll_records(consumer, setup["max_batch"], _CHILD_POLL_MS, got)
            if got:
                batches.send_bytes(pack_batch(epoch, RecordBatch.from_records(got)))
    except (EOFError, BrokenPipeError):
        return 0  # the streamer closed the pipes (or is gone): nothing here is committed, so nothing is lost
    except REFUSED as e:  # what no retry mends (an ACL on the events topic): the streamer says it in one line, exit 2
        log.error({"event": "fetch_process_refused", "error": describe(e)})
        with contextlib.suppress(OSError):
            batches.send_bytes(_REFUSAL + (describe(e) + settings_hint(e)).encode())
        return 2
    except Exception as e:  # noqa: BLE001 - one line in the streamer's log; the streamer stops on the closed pipe
        log.exception({"event": "fetch_process_crashed", "error": repr(e)})
        return 1
    finally:
        consumer.close(autocommit=False)


if __name__ == "__main__":
    sys.exit(main())
