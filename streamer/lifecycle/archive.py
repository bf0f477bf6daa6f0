"""Event archive: every committed, validly decoded event as Parquet, the next model's training data.

Layout::

    DIR/date=YYYY-MM-DD/part-YYYYMMDDTHHMMSSZ-<id>.parquet   closed, immutable files
    DIR/_spool/<id>.arrows                                   the open file of a running streamer

Columns: ``id`` and ``ts`` (the event's own id and timestamp, as text), one
float64 column per model feature (by name, so ``ParquetSource`` trains on the
archive directly), then ``kdsm_score``, ``kdsm_severity``,
``kdsm_model_version``, ``kdsm_schema_hash``, ``kdsm_topic``,
``kdsm_partition``, ``kdsm_offset``, ``kdsm_kafka_ts`` and
``kdsm_committed_at``. (topic, partition, offset) identifies an event, so a
reader can drop the duplicates at-least-once delivery may leave.

Ordering (commit vs. archive). The streamer calls ``on_committed`` only after
a batch's offsets are committed, so no row is archived without its commit.
The rows are then appended to a spool in the Arrow IPC stream format and
fsynced before ``on_committed`` returns; IPC streams stay readable up to the
last complete batch even when the writer dies, unlike an unclosed Parquet
file. Rolling (by size, age or a date change) closes the spool and a
background thread (off the scoring path) converts it to a Parquet file under
a temporary name, fsyncs it and renames it into place, so readers never see
half a file. A streamer that crashed leaves its spool behind; the
next streamer to start on the same directory recovers it (the spool is
``flock``-ed while its owner lives). The one loss window is a crash between
a commit and the spool fsync of the batches it covered (milliseconds; at most
``stream.max_in_flight`` batches, which one commit may cover);
archiving before the commit would close it but archive rows whose commit may
never happen. Duplicates: a batch replayed after a failed commit is archived
again only if it is committed again, so duplicates come only from the broker's
own at-least-once redelivery.

Retention deletes the oldest closed files above ``retention_max_bytes`` and
those older than ``retention_max_age_hours``.

Object storage (``archive.dir: s3://bucket/archive``). The spool stays on
local disk (``archive.spool_dir``: an object cannot be appended to or
fsynced). A closed file is written straight to its final key (an object
appears whole or not at all), then a small marker
``_committed/date=.../part-....parquet.json`` publishes it; readers
(``closed_files``, retrain, ``kdsm train --data`` on the archive root) trust
only files with a marker. A streamer killed between the two leaves an
unmarked object and its spool; the next start re-publishes the spool under
the same key, so the object is never counted twice. A publish that fails
(store unreachable) leaves the spool, unlocked; the roll thread retries it
every ``RETRY_S`` seconds, as does the next start. Retention deletes the
marker first, then the object.

>>> import tempfile
>>> from streamer.lifecycle.config import ArchiveConfig
>>> sink = ArchiveSink(ArchiveConfig(dir=tempfile.mkdtemp(), fsync=False))
>>> sink.on_committed(example_batch(3))
>>> sink.close()
>>> [f.name.startswith("part-") for f in closed_files(sink.root)]
[True]
"""

from __future__ import annotations

import calendar
import fcntl
import hashlib
import logging
import os
import queue
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from offline_train import storage

from .config import ArchiveConfig
from .metrics import LifecycleMetrics

log = logging.getLogger("kdsm.archive")


META_COLUMNS = ("kdsm_score", "kdsm_severity", "kdsm_model_version", "kdsm_schema_hash", "kdsm_topic",
                "kdsm_partition", "kdsm_offset", "kdsm_kafka_ts", "kdsm_committed_at")
RESERVED = {"id", "ts", *META_COLUMNS}
SPOOL = "_spool"
OPENING = ".opening"  # a spool's suffix until it is locked (recover() reads such a file only once a minute old)
RETRY_S = 30.0  # how often the roll thread retries publishing spools whose conversion failed


def archive_schema(feature_names: list[str]) -> pa.Schema:
    clash = RESERVED.intersection(feature_names)
    if clash:
        raise ValueError(f"feature name(s) {sorted(clash)} clash with archive columns")
    ts = pa.timestamp("ms", tz="UTC")
    return pa.schema([("id", pa.string()), ("ts", pa.string()), *[(f, pa.float64()) for f in feature_names],
                      ("kdsm_score", pa.float64()), ("kdsm_severity", pa.string()), ("kdsm_model_version", pa.string()),
                      ("kdsm_schema_hash", pa.string()), ("kdsm_topic", pa.string()), ("kdsm_partition", pa.int32()),
                      ("kdsm_offset", pa.int64()), ("kdsm_kafka_ts", ts), ("kdsm_committed_at", ts)])


def batch_table(batch) -> pa.Table:
    """A ``ScoredBatch`` as an archive table (schema ``archive_schema(batch.feature_names)``)."""
    n = len(batch.scores)
    schema = archive_schema(list(batch.feature_names))
    committed = batch.committed_at if batch.committed_at is not None else time.time()
    X = np.asarray(batch.X, dtype=np.float64).reshape(n, len(batch.feature_names))
    kafka_ts = np.asarray(batch.timestamps_ms, dtype=np.int64)
    cols = [pa.array([None if i is None else str(i) for i in batch.event_ids], pa.string()),
            pa.array([None if t is None else str(t) for t in batch.event_ts], pa.string()),
            *[pa.array(X[:, j]) for j in range(X.shape[1])],
            pa.array(np.asarray(batch.scores, np.float64)),
            pa.array([str(s) for s in batch.severities], pa.string()),
            pa.array([batch.model_version] * n, pa.string()), pa.array([batch.schema_hash] * n, pa.string()),
            pa.array(list(batch.topics), pa.string()), pa.array(np.asarray(batch.partitions, np.int32)),
            pa.array(np.asarray(batch.offsets, np.int64)),
            pa.array(kafka_ts, pa.int64(), mask=kafka_ts < 0).cast(pa.timestamp("ms", tz="UTC")),
            pa.array(np.full(n, int(committed * 1000), np.int64)).cast(pa.timestamp("ms", tz="UTC"))]
    return pa.Table.from_arrays(cols, schema=schema)


def closed_files(root: str | os.PathLike) -> list[Path] | list[storage.StoredFile]:
    """Closed archive files, oldest first (by the close time, the file's mtime, or its marker's on an object store)."""
    if storage.is_remote(root):
        return storage.committed_files(root)
    files = [p for p in Path(root).glob("date=*/part-*.parquet") if p.is_file()]
    return sorted(files, key=lambda p: (_mtime(p), p.name))


def _mtime(p: Path) -> float:
    if isinstance(p, storage.StoredFile):
        return p.mtime
    try:
        return p.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _size(p: Path) -> int:
    if isinstance(p, storage.StoredFile):
        return p.size
    try:
        return p.stat().st_size
    except FileNotFoundError:
        return 0


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_spool(path: Path) -> pa.Table | None:
    """Every complete record batch of an IPC stream, even one whose writer died mid-write."""
    batches = []
    schema = None
    try:
        with pa.OSFile(str(path), "rb") as f:
            reader = ipc.open_stream(f)
            schema = reader.schema
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError):
                    log.warning({"event": "archive_spool_partial", "path": str(path), "kept_batches": len(batches)})
                    break
    except (pa.ArrowInvalid, OSError) as e:
        log.warning({"event": "archive_spool_unreadable", "path": str(path), "error": str(e), "action": "nothing to recover"})
        return None
    return pa.Table.from_batches(batches, schema=schema) if batches else None


def default_spool_dir(archive_dir: str) -> Path:
    """Where the open file of an object-store archive lives when ``archive.spool_dir`` is unset (one per archive)."""
    return Path(tempfile.gettempdir()) / "kdsm-archive-spool" / hashlib.sha256(archive_dir.encode()).hexdigest()[:12]


class _Spool:
    """The open file: an flock-ed Arrow IPC stream, fsynced per batch."""

    def __init__(self, root: Path, schema: pa.Schema, opened: float, fsync: bool):
        self.dir = root / SPOOL
        self.dir.mkdir(parents=True, exist_ok=True)
        self.id = uuid.uuid4().hex[:12]
        self.path = self.dir / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(opened))}-{self.id}.arrows"
        # Opened and locked under a name recover() leaves alone for a minute, then renamed: under its own name the
        # spool is always locked. Opened there, a recover() between the open and the lock (the tick thread's, or another
        # streamer's on the same directory) took the empty unlocked file for a dead one and unlinked it.
        opening = self.path.with_name(self.path.name + OPENING)
        self.f = open(opening, "wb", buffering=0)  # unbuffered: tell() is what the disk holds, so a torn write can be cut
        try:
            fcntl.flock(self.f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(opening, self.path)
            if fsync:  # the name a recovery finds it under survives a power loss too
                _fsync_dir(self.dir)
        except BaseException:
            self.f.close()
            raise
        self.writer = ipc.new_stream(self.f, schema)
        self.schema, self.opened, self.fsync, self.rows = schema, opened, fsync, 0
        self.date = time.strftime("%Y-%m-%d", time.gmtime(opened))
        self.torn = False

    def append(self, table: pa.Table) -> None:
        good = self.f.tell()
        try:
            self.writer.write_table(table)
            if self.fsync:
                os.fsync(self.f.fileno())
        except BaseException:
            # A reader stops at the first torn message, so every batch written after it would be lost: cut it off.
            # The spool is then closed with the batches before it (the sink rolls it); its writer is not used again.
            self.torn = True
            try:
                os.ftruncate(self.f.fileno(), good)
                self.f.seek(good)
            except OSError as e:
                log.error({"event": "archive_spool_cut_failed", "path": str(self.path), "error": str(e)})
            raise
        self.rows += table.num_rows

    @property
    def bytes(self) -> int:
        return self.f.tell()

    def finish(self) -> None:
        if not self.torn:  # a torn spool ends at its last whole batch; read_spool needs no end-of-stream marker
            self.writer.close()
        # The lock goes with the descriptor; convert before unlocking so no recovery races us.


class ArchiveSink:
    """Streamer sink: ``on_committed(batch)`` appends the batch; files roll by size, age and date."""

    name = "archive"

    def __init__(self, cfg: ArchiveConfig, clock=time.time, background: bool = True, metrics: LifecycleMetrics | None = None):
        if not cfg.dir:
            raise ValueError("archive.dir is not set")
        self.cfg = cfg
        self.metrics = metrics or LifecycleMetrics()
        self.remote = storage.is_remote(cfg.dir)
        if self.remote:
            storage.check_bucket(cfg.dir)  # an unreachable store or a missing bucket stops the start, in one line
            self.root = cfg.dir.rstrip("/")
            self.spool_root = Path(cfg.spool_dir or default_spool_dir(cfg.dir))
        else:
            self.root = self.spool_root = Path(cfg.dir)
            self.root.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self._lock = threading.RLock()
        self._spool: _Spool | None = None
        self._closed = False
        self.recovered = self.recover()
        self.enforce_retention()
        self._stop = threading.Event()
        self._pending: queue.Queue = queue.Queue()  # detached spools waiting for conversion
        self._thread = None
        if background:  # converts rolled spools off the hot path; rolls an idle spool by age
            self._thread = threading.Thread(target=self._tick_loop, name="kdsm-archive-roll", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------ sink API
    def on_committed(self, batch) -> None:
        if len(batch.scores) == 0:
            return
        table = batch_table(batch)
        now = self.clock()
        with self._lock:
            if self._closed:
                raise RuntimeError("archive sink is closed")
            sp = self._spool
            if sp is not None and (sp.schema != table.schema or sp.date != time.strftime("%Y-%m-%d", time.gmtime(now))):
                self._roll("schema-or-date")
            if self._spool is None:
                self._spool = _Spool(self.spool_root, table.schema, now, self.cfg.fsync)
            try:
                self._spool.append(table)
            except Exception:
                self._roll("write-error")  # its whole batches are kept; the next batch opens a new spool
                raise
            self.metrics.archive_rows.inc(table.num_rows)
            self.maybe_roll(now)

    def maybe_roll(self, now: float | None = None) -> Path | None:
        now = self.clock() if now is None else now
        with self._lock:
            sp = self._spool
            if sp is None:
                return None
            if sp.bytes >= self.cfg.max_file_bytes:
                return self._roll("size")
            if now - sp.opened >= self.cfg.max_file_seconds:
                return self._roll("age")
        return None

    def flush(self) -> Path | None:
        """Close the open file now, and convert any rolled ones (tests, shutdown)."""
        self._drain()
        with self._lock:
            return self._convert(self._detach(), "flush") if self._spool is not None else None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            if self._spool is not None:
                self._roll("close")
            self._closed = True
        self._drain()

    # ------------------------------------------------------------ internals
    def _tick_loop(self) -> None:
        period = min(1.0, self.cfg.max_file_seconds / 4)
        last_recover = time.monotonic()
        while not self._stop.wait(period):
            try:
                self.maybe_roll()
                self._drain()
                if time.monotonic() - last_recover >= RETRY_S:
                    # A conversion that failed (object store down, disk full) left its spool unlocked: retry it.
                    last_recover = time.monotonic()
                    self.recover()
            except Exception as e:  # a full disk or an unreachable store must not kill the thread; the spool is retried
                log.error({"event": "archive_roll_failed", "error": str(e)})

    def _drain(self) -> None:
        while True:
            try:
                sp, how = self._pending.get_nowait()
            except queue.Empty:
                return
            self._convert(sp, how)

    def _detach(self) -> _Spool:
        sp, self._spool = self._spool, None
        sp.finish()
        return sp

    def _roll(self, how: str) -> Path | None:
        """Close the open spool: converted by the background thread if there is one, else now."""
        sp = self._detach()
        if self._thread is not None and not self._stop.is_set():
            self._pending.put((sp, how))
            return None
        return self._convert(sp, how)

    def _convert(self, sp: _Spool, how: str) -> Path | None:
        try:
            table = read_spool(sp.path)
            out = self._publish(table, sp.date, sp.opened, sp.id) if table is not None else None
            os.unlink(sp.path)
        finally:
            sp.f.close()  # releases the flock
        if out is not None:
            self.metrics.archive_files.labels(how).inc()
        self.enforce_retention()
        return out

    def _publish(self, table: pa.Table, date: str, opened: float, ident: str) -> Path | str:
        """Write Parquet under a temp name, fsync, rename into the date partition (object store: object, then marker)."""
        name = f"part-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(opened))}-{ident}.parquet"
        compression = None if self.cfg.compression == "none" else self.cfg.compression
        if self.remote:
            rel = f"date={date}/{name}"
            fs, path = storage.resolve(storage.join(self.root, rel))
            with storage.guard(self.root):
                pq.write_table(table, path, filesystem=fs, compression=compression)
            storage.write_marker(self.root, rel, {"rows": table.num_rows, "closed_at": time.time()})
            return storage.join(self.root, rel)
        d = self.root / f"date={date}"
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{name}.tmp"
        pq.write_table(table, tmp, compression=compression)
        if self.cfg.fsync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, d / name)
        if self.cfg.fsync:
            _fsync_dir(d)
        return d / name

    def recover(self) -> list[Path]:
        """Turn spools left by dead streamers (no flock held) into closed files."""
        out = []
        spools = sorted((self.spool_root / SPOOL).glob("*.arrows"))
        # A spool still under its opening name: a crash between its open and its rename, or a rename a power loss
        # undid (its batches fsynced all the same); read like any other once a minute old (not one being opened now:
        # wall time, as the mtime is)
        spools += [p for p in sorted((self.spool_root / SPOOL).glob(f"*.arrows{OPENING}"))
                   if time.time() - _mtime(p) > 60]
        for path in spools:
            try:
                f = open(path, "rb")
            except FileNotFoundError:
                continue
            try:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live streamer owns it
                if not path.exists():
                    continue  # its owner closed it between our glob and our lock
                table = read_spool(path)
                opened_s, _, ident = path.name.removesuffix(OPENING).removesuffix(".arrows").partition("-")
                try:
                    opened = calendar.timegm(time.strptime(opened_s, "%Y%m%dT%H%M%SZ"))
                except ValueError:
                    opened = _mtime(path)
                if table is not None and table.num_rows:
                    out.append(self._publish(table, time.strftime("%Y-%m-%d", time.gmtime(opened)), opened, ident))
                    self.metrics.archive_files.labels("recovered").inc()
                    log.warning({"event": "archive_spool_recovered", "rows": table.num_rows, "spool": path.name})
                os.unlink(path)
            finally:
                f.close()
        return out

    def enforce_retention(self) -> list[Path]:
        """Delete closed files older than the age bound, then the oldest ones above the size bound."""
        files = closed_files(self.root)
        deleted = []
        now = self.clock()
        max_age = self.cfg.retention_max_age_hours
        keep = []
        for p in files:
            if max_age is not None and now - _mtime(p) > max_age * 3600:
                deleted.append(p)
            else:
                keep.append(p)
        if self.cfg.retention_max_bytes is not None:
            sizes = {p: _size(p) for p in keep}
            total = sum(sizes.values())
            while keep and total > self.cfg.retention_max_bytes:
                p = keep.pop(0)
                total -= sizes[p]
                deleted.append(p)
        for p in deleted:
            if isinstance(p, storage.StoredFile):  # unpublish first: a reader never sees a marker without its object
                rel = p[len(self.root) + 1:]
                storage.delete_file(storage.marker_of(self.root, rel))
                storage.delete_file(p)
                self.metrics.archive_deleted.inc()
                continue
            try:
                p.unlink()
                self.metrics.archive_deleted.inc()
            except FileNotFoundError:
                pass  # another streamer's retention got there first
            try:
                p.parent.rmdir()  # only succeeds when the date directory is empty
            except OSError:
                pass
        return deleted


def example_batch(n: int = 4, features=("f0", "f1"), offset0: int = 0, version: str = "v-test", seed: int = 0):
    """A ScoredBatch-shaped object for docs and tests (the real one is ``streamer.pipeline.batch.ScoredBatch``)."""
    rng = np.random.default_rng(seed)
    scores = rng.gamma(2.0, 1.0, n)
    return SimpleNamespace(topics=["events"] * n, partitions=np.zeros(n, np.int32),
                           offsets=np.arange(offset0, offset0 + n, dtype=np.int64),
                           timestamps_ms=np.full(n, 1_700_000_000_000, np.int64),
                           event_ids=[f"e{offset0 + i}" for i in range(n)], event_ts=[None] * n,
                           X=rng.normal(size=(n, len(features))), scores=scores,
                           severities=np.where(scores > 6, "warning", ""), model_version=version,
                           schema_hash="h", feature_names=list(features), thresholds={"warning": 6.0},
                           n_dead_letters=0, committed_at=None)
