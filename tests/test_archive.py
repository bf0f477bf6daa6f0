"""Archive sink: schema, rolling, atomic close, crash recovery, retention."""

from __future__ import annotations

import errno
import io
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offline_train.data import ParquetSource
from streamer.lifecycle import archive
from streamer.lifecycle.archive import (
    SPOOL,
    ArchiveSink,
    archive_schema,
    closed_files,
    example_batch,
)
from streamer.lifecycle.config import ArchiveConfig


class Clock:
    def __init__(self, t: float = 1_767_225_000.0):  # 2025-12-31T23:50:00Z
        self.t = t

    def __call__(self) -> float:
        return self.t


def read_all(root) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in closed_files(root)])


def test_rows_schema_and_no_loss(tmp_path):
    sink = ArchiveSink(ArchiveConfig(dir=str(tmp_path), fsync=False), background=False)
    for k in range(5):
        sink.on_committed(example_batch(40, offset0=40 * k, seed=k))
    sink.close()
    files = closed_files(tmp_path)
    assert len(files) == 1 and files[0].parent.name.startswith("date=")
    t = read_all(tmp_path)
    assert t.schema.equals(archive_schema(["f0", "f1"]))
    assert t.num_rows == 200
    assert sorted(t.column("kdsm_offset").to_pylist()) == list(range(200))
    b = example_batch(40, offset0=0, seed=0)
    np.testing.assert_allclose(t.column("f1").to_numpy()[:40], b.X[:, 1])
    assert t.column("kdsm_model_version").unique().to_pylist() == ["v-test"]
    # The training reader takes the archive as it is.
    src = ParquetSource(tmp_path, features=["f0", "f1"])
    X, _ = src.load()
    assert X.shape == (200, 2)
    assert not list(tmp_path.rglob("*.tmp")) and not list((tmp_path / SPOOL).glob("*"))


class TornWrites(io.RawIOBase):
    """A spool file whose next write, once armed, lands half its bytes and then fails, as a full disk does."""

    def __init__(self, f):
        self.f, self.armed = f, False

    def write(self, b):
        if self.armed:
            self.armed = False
            self.f.write(bytes(b)[: max(1, len(b) // 2)])
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.f.write(b)

    def writable(self):
        return True

    def fileno(self):
        return self.f.fileno()

    def tell(self):
        return self.f.tell()

    def seek(self, pos, whence=0):
        return self.f.seek(pos, whence)

    def close(self):
        self.f.close()
        super().close()


def test_a_torn_write_loses_that_batch_only(tmp_path, monkeypatch):
    spools = []

    def open_spool(path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        if str(path).endswith(f".arrows{archive.OPENING}") and "w" in mode:  # a spool, opened under its opening name
            spools.append(f := TornWrites(f))
        return f

    monkeypatch.setattr(archive, "open", open_spool, raising=False)
    sink = ArchiveSink(ArchiveConfig(dir=str(tmp_path), fsync=True), background=False)
    sink.on_committed(example_batch(100, offset0=0))
    spools[0].armed = True
    with pytest.raises(OSError):
        sink.on_committed(example_batch(100, offset0=100))
    for k in range(2, 6):
        sink.on_committed(example_batch(100, offset0=100 * k))
    sink.close()
    # Before the fix the torn message stopped the reader: offsets 200-599 were written, acknowledged and lost.
    offsets = sorted(read_all(tmp_path).column("kdsm_offset").to_pylist())
    assert offsets == list(range(100)) + list(range(200, 600))
    assert len(spools) == 2 and not list((tmp_path / SPOOL).glob("*"))
    assert sink.metrics.archive_files.labels("write-error")._value.get() == 1


def test_roll_by_size_age_and_date(tmp_path):
    clock = Clock()
    cfg = ArchiveConfig(dir=str(tmp_path), fsync=False, max_file_bytes=20_000, max_file_seconds=60)
    sink = ArchiveSink(cfg, clock=clock, background=False)
    for k in range(10):  # ~ 100 rows * 13 columns per batch: the size bound rolls every few batches
        sink.on_committed(example_batch(100, offset0=100 * k, seed=k))
    n_size = len(closed_files(tmp_path))
    assert n_size >= 2
    sink.flush()
    sink.on_committed(example_batch(5, offset0=1000))
    clock.t += 61
    assert sink.maybe_roll() is not None  # the age bound rolls without a new batch
    clock.t += 600  # past midnight UTC: a new date partition
    sink.on_committed(example_batch(5, offset0=1005))
    sink.close()
    dates = sorted({f.parent.name for f in closed_files(tmp_path)})
    assert dates == ["date=2025-12-31", "date=2026-01-01"]
    t = read_all(tmp_path)
    assert sorted(t.column("kdsm_offset").to_pylist()) == list(range(1010))


def test_background_thread_rolls_idle_spool_and_converts_rolled_ones(tmp_path):
    sink = ArchiveSink(ArchiveConfig(dir=str(tmp_path), fsync=True, max_file_seconds=0.3))
    sink.on_committed(example_batch(7))
    deadline = time.monotonic() + 5
    while not closed_files(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert read_all(tmp_path).num_rows == 7  # closed by age with no new batch
    sink.cfg.max_file_bytes = 20_000
    for k in range(10):  # size rolls are handed to the background thread
        sink.on_committed(example_batch(100, offset0=7 + 100 * k, seed=k))
    sink.close()
    t = read_all(tmp_path)
    assert sorted(t.column("kdsm_offset").to_pylist()) == list(range(1007))
    assert len(closed_files(tmp_path)) >= 3 and not list((tmp_path / SPOOL).glob("*"))


def test_crash_recovery_and_live_spool_untouched(tmp_path):
    cfg = ArchiveConfig(dir=str(tmp_path), fsync=True)
    a = ArchiveSink(cfg, background=False)
    for k in range(3):
        a.on_committed(example_batch(10, offset0=10 * k, seed=k))
    # A second streamer on the same directory leaves the live spool alone.
    b = ArchiveSink(cfg, background=False)
    assert b.recovered == [] and len(list((tmp_path / SPOOL).glob("*.arrows"))) == 1
    # Crash of a: no close, no footer, and a torn last write.
    spool = a._spool
    with open(spool.path, "ab") as f:
        f.write(b"\xff\xff\xff\xff\x10\x00\x00\x00garbage")
    spool.f.close()  # the process died: its flock is gone
    c = ArchiveSink(cfg, background=False)
    assert len(c.recovered) == 1
    t = pq.read_table(c.recovered[0])
    assert sorted(t.column("kdsm_offset").to_pylist()) == list(range(30))
    assert not list((tmp_path / SPOOL).glob("*.arrows"))
    b.close()
    c.close()


def test_a_recover_while_a_spool_is_being_opened_leaves_it_alone(tmp_path, monkeypatch):
    """A spool was opened under its own name and locked a step later: a recover() between the two (the background
    thread's, or another streamer's on the same directory) unlinked the empty unlocked file as a dead streamer's, and
    every committed row written to it afterwards was lost with no log line."""
    cfg = ArchiveConfig(dir=str(tmp_path), fsync=False)
    sink = ArchiveSink(cfg, background=False)
    other = ArchiveSink(cfg, background=False)
    real_flock, ran = archive.fcntl.flock, []

    def flock_after_a_recover(fd, op):
        if not ran:  # once: the recovery's own flocks come through here too
            ran.append(None)
            ran[0] = other.recover()
        return real_flock(fd, op)

    monkeypatch.setattr(archive.fcntl, "flock", flock_after_a_recover)
    sink.on_committed(example_batch(5))
    monkeypatch.setattr(archive.fcntl, "flock", real_flock)
    sink.on_committed(example_batch(5, offset0=5))
    sink.close()
    other.close()
    assert ran == [[]]
    (closed,) = closed_files(tmp_path)
    assert sorted(pq.read_table(closed).column("kdsm_offset").to_pylist()) == list(range(10))
    # What a crash between the open and the rename leaves (an empty file under the opening name) goes once it is old.
    stale = tmp_path / SPOOL / f"20250101T000000Z-abc.arrows{archive.OPENING}"
    stale.write_bytes(b"")
    ArchiveSink(cfg, background=False).close()
    assert stale.exists()
    os.utime(stale, (time.time() - 120, time.time() - 120))
    ArchiveSink(cfg, background=False).close()
    assert not stale.exists()
    # One that holds batches (its rename undone by a power loss, the batches fsynced) is recovered, not deleted.
    sink = ArchiveSink(cfg, background=False)
    sink.on_committed(example_batch(7, offset0=100))
    sink._spool.f.close()  # the process died: no close, its flock gone
    renamed_back = sink._spool.path.with_name(sink._spool.path.name + archive.OPENING)
    os.rename(sink._spool.path, renamed_back)
    os.utime(renamed_back, (time.time() - 120, time.time() - 120))
    recovered = ArchiveSink(cfg, background=False)
    assert len(recovered.recovered) == 1 and not renamed_back.exists()
    assert sorted(pq.read_table(recovered.recovered[0]).column("kdsm_offset").to_pylist()) == list(range(100, 107))
    recovered.close()


def test_retention_by_bytes_and_age(tmp_path):
    clock = Clock(time.time())
    cfg = ArchiveConfig(dir=str(tmp_path), fsync=False, retention_max_bytes=10**9, retention_max_age_hours=1)
    sink = ArchiveSink(cfg, clock=clock, background=False)
    for k in range(4):
        sink.on_committed(example_batch(50, offset0=50 * k, seed=k))
        sink.flush()
    files = closed_files(tmp_path)
    assert len(files) == 4
    old = time.time() - 2 * 3600
    os.utime(files[0], (old, old))
    assert sink.enforce_retention() == [files[0]]
    sink.cfg.retention_max_bytes = sum(f.stat().st_size for f in files[2:])
    deleted = sink.enforce_retention()
    assert deleted == [files[1]]  # oldest first, until under the bound
    assert closed_files(tmp_path) == files[2:]
    sink.close()


def test_feature_name_clash_is_an_error(tmp_path):
    sink = ArchiveSink(ArchiveConfig(dir=str(tmp_path), fsync=False), background=False)
    with pytest.raises(ValueError, match="clash"):
        sink.on_committed(example_batch(3, features=("f0", "kdsm_score")))
    sink.close()
