"""SIGKILL a real ``kdsm stream`` with the archive on, restart it: the dead streamer's spool is recovered,
every committed event ends in readable Parquet (at most the batches between a commit and their spool fsync
may be missing), and a SIGTERM closes the open file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_blobs
from kafka import KafkaConsumer, TopicPartition
from stream_support import create_topics, event, make_settings, produce_paced, write_stream_config

from offline_train.detector import KDSM
from streamer.lifecycle.archive import SPOOL, archive_schema, closed_files, read_spool

pytestmark = pytest.mark.integration


def archived_ids(root) -> list:
    """Ids in closed files and in live spools (read as far as they are complete)."""
    tables = [pq.read_table(f, columns=["id"]) for f in closed_files(root)]
    for sp in (root / SPOOL).glob("*.arrows"):
        t = read_spool(sp)
        if t is not None:
            tables.append(t.select(["id"]))
    return [i for t in tables for i in t.column("id").to_pylist()]


def _start(cfg, model_dir, log):
    return subprocess.Popen([sys.executable, "-m", "streamer", "stream", "--config", cfg, "--model", model_dir],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def test_sigkill_restart_recovers_the_spool(tmp_path, kafka_bootstrap, redis_url, unique, tiny_model_dir):
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=100)
    create_topics(s)
    root = tmp_path / "archive"
    cfg = tmp_path / "stream.yaml"
    write_stream_config(s, cfg, archive={"dir": str(root), "max_file_seconds": 3600, "fsync": True},
                        drift={"enabled": False})
    X = make_blobs(n=2400, seed=0)[0][1200:]
    values = [event(f"e{i}", x, model.feature_names_) for i, x in enumerate(X)]

    def produce_slowly():  # ~600 events/s, so the kill lands mid-stream
        produce_paced(s, values, per_flush=60)

    log = open(tmp_path / "stream.log", "ab")
    proc = _start(str(cfg), str(tiny_model_dir), log)
    producer = threading.Thread(target=produce_slowly)
    producer.start()
    try:
        deadline = time.monotonic() + 40
        while len(archived_ids(root)) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        at_kill = len(archived_ids(root))
        assert 300 <= at_kill < len(values), (tmp_path / "stream.log").read_text()[-3000:]
        assert not closed_files(root)  # everything so far sits in the dead streamer's spool
        proc = _start(str(cfg), str(tiny_model_dir), log)
        producer.join(30)
        # Wait on the group's commit, not on the archive: a batch lost in the crash window never reaches the archive,
        # and every batch committed from here on is archived before the SIGTERM below returns.
        group = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=s.kafka.group_id, enable_auto_commit=False)
        try:
            deadline = time.monotonic() + 45
            while (group.committed(TopicPartition(s.kafka.events_topic, 0)) or 0) < len(values) \
                    and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            group.close()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    assert "recovered" in (tmp_path / "stream.log").read_text()
    assert not list((root / SPOOL).glob("*.arrows"))  # SIGTERM closed the open file
    files = closed_files(root)
    assert len(files) >= 2  # the recovered spool and the restarted streamer's file
    table = pa.concat_tables([pq.read_table(f) for f in files])
    assert table.schema.equals(archive_schema(model.feature_names_))
    counts = Counter(table.column("id").to_pylist())
    missing = {f"e{i}" for i in range(len(values))} - set(counts)
    dups = sum(c - 1 for c in counts.values())
    print(f"archive: {at_kill} rows at the kill, {len(missing)} missing, {dups} duplicates", sorted(missing, key=lambda m: int(m[1:]))[:3], sorted(missing, key=lambda m: int(m[1:]))[-3:])
    # The documented window: the batches of one commit, between the commit and their spool fsync.
    assert len(missing) <= s.stream.max_in_flight * s.stream.max_batch
    assert dups <= (s.stream.max_in_flight + 1) * s.stream.max_batch
