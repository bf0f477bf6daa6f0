"""SIGKILL the streamer mid-stream and restart it: no event without its alert or dead letter; duplicates bounded.

Also: SIGTERM makes the restarted streamer finish, drain, commit and exit 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import make_blobs
from kafka import KafkaConsumer, TopicPartition
from stream_support import create_topics, event, make_settings, produce_paced, write_stream_config

from offline_train.detector import KDSM
from streamer.lifecycle.control import connect
from streamer.lifecycle.thresholds import ThresholdStore

pytestmark = pytest.mark.integration


class TopicReader:
    """Reads a one-partition topic from the start, incrementally."""

    def __init__(self, bootstrap, topic):
        self.c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        self.c.assign([TopicPartition(topic, 0)])
        self.c.seek_to_beginning()
        self.values = []

    def poll(self):
        for recs in self.c.poll(timeout_ms=100).values():
            self.values.extend(json.loads(r.value) for r in recs)
        return self.values


def _wait_log(path, needle: str, count: int, timeout: float = 40.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.read_text().count(needle) >= count:
            return True
        time.sleep(0.1)
    return False


def _start(cfg, model_dir, log):
    return subprocess.Popen([sys.executable, "-m", "streamer", "stream", "--config", cfg, "--model", model_dir],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


PRODUCE_RATE = 400  # events/s at most: produce_paced's bursts of 40 with 0.1 s pauses


def _pid_gone(pid: int, timeout: float = 10.0) -> bool:
    """The process has exited: no such pid, or a zombie (an orphan waits for whatever reaps in this container)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.1)
    return False


def fetch_pids(log_path) -> list[int]:
    """The fetch processes a streamer's log names (``stream.fetch_process``), in order."""
    return [json.loads(line)["pid"] for line in log_path.read_text().splitlines()
            if '"event": "fetch_process_started"' in line]


@pytest.mark.parametrize(("commit_interval_ms", "fetch_process"), [(0, False), (500, False), (0, True)],
                         ids=["commit-each-batch", "commit-interval", "fetch-process"])
def test_sigkill_and_restart_loses_nothing(tmp_path, kafka_bootstrap, redis_url, unique, tiny_model_dir,
                                           commit_interval_ms, fetch_process):
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=100, max_in_flight=2,
                      fetch_process=fetch_process)
    s.kafka.commit_interval_ms = commit_interval_ms
    create_topics(s)
    # Every valid event alerts (warning threshold 0), so "no event without its output" is checkable per id.
    ThresholdStore(connect(redis_url), s.redis.key_prefix).set(model.version_, "warning", 0.0, None, "test", 1.0)
    cfg = tmp_path / "stream.yaml"
    write_stream_config(s, cfg)
    X = make_blobs(n=2400, seed=0)[0][1200:]
    values = [event(f"e{i}", x, model.feature_names_) if i % 50 else b"not json" for i, x in enumerate(X)]
    n_bad = sum(1 for v in values if v == b"not json")

    def produce_slowly():  # ~PRODUCE_RATE, so the kill lands mid-stream
        produce_paced(s, values, per_flush=40)

    alerts = TopicReader(kafka_bootstrap, s.kafka.alerts_topic)
    dead = TopicReader(kafka_bootstrap, s.kafka.deadletter_topic)
    log_path = tmp_path / "stream.log"
    log = open(log_path, "ab")
    proc = _start(str(cfg), str(tiny_model_dir), log)
    # Produce only once the streamer consumes, so the kill lands mid-stream rather than after a backlog.
    assert _wait_log(log_path, '"event": "partitions_assigned"', 1), log_path.read_text()[-3000:]
    producer = threading.Thread(target=produce_slowly)
    producer.start()
    try:
        deadline = time.monotonic() + 40
        while len(alerts.poll()) < 300 and time.monotonic() < deadline:
            pass
        assert len(alerts.values) >= 300, (tmp_path / "stream.log").read_text()[-3000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        at_kill = len(alerts.values)
        if fetch_process:  # the child reads EOF on its stdin and exits: no orphan fetching on
            assert len(fetch_pids(log_path)) == 1 and _pid_gone(fetch_pids(log_path)[0]), "the fetch process outlived a SIGKILL"
        assert at_kill < len(values) - n_bad, "the stream ended before the kill; nothing was tested"
        proc = _start(str(cfg), str(tiny_model_dir), log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ids = {a["event_id"] for a in alerts.poll()}
            dead.poll()
            if len(ids) >= len(values) - n_bad and len(dead.values) >= n_bad:
                break
        producer.join(30)
        # Signal handlers are installed before the "started" line: SIGTERM now tests the graceful path.
        assert _wait_log(log_path, '"event": "started"', 2)
        os.kill(proc.pid, signal.SIGTERM)  # graceful: finish the batch, drain, commit, close
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    counts = Counter(a["event_id"] for a in alerts.poll())
    assert set(counts) == {f"e{i}" for i in range(len(values)) if i % 50}
    assert {d["source"]["offset"] for d in dead.poll()} >= {i for i in range(len(values)) if i % 50 == 0}
    dups = sum(c - 1 for c in counts.values())
    print(f"killed after {at_kill} alerts; duplicates {dups}")
    # Duplicates only from batches that were published but not committed at the kill: those in flight, and with a
    # commit interval the acknowledged ones waiting for it (at most an interval and a poll's wait of events).
    waiting = PRODUCE_RATE * (commit_interval_ms + s.stream.max_wait_ms) / 1000 if commit_interval_ms else 0
    assert dups <= (s.stream.max_in_flight + 1) * s.stream.max_batch + waiting
    # Re-delivered events get the same alert_id, so subscribers can de-duplicate.
    by_event = {}
    for a in alerts.values:
        assert by_event.setdefault(a["event_id"], a["alert_id"]) == a["alert_id"]
    text = (tmp_path / "stream.log").read_text()
    assert '"event": "stopped"' in text and '"signal": "SIGTERM"' in text
