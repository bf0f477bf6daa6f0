"""``stream.fetch_process``: records fetched and unpacked by a child process (streamer/pipeline/fetcher.py).

Scoring, dead letters, a SIGKILL of the streamer (the child goes too), rebalances and exactly once with the fetch
process are the parametrised cases of test_stream_e2e, test_stream_crash, test_stream_rebalance and
test_stream_exactly_once. Here: the frames, what the loop drops after a reassignment, and a fetch process killed
under a running streamer.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

import numpy as np
import pytest
from conftest import make_blobs
from kafka import KafkaConsumer
from kafka.future import Future
from kafka.structs import TopicPartition
from stream_support import (
    Collect,
    StreamerThread,
    create_topics,
    event,
    make_settings,
    produce,
    produce_paced,
    wait_for,
    write_stream_config,
)
from test_stream_crash import TopicReader, _pid_gone, _start, _wait_log, fetch_pids
from txn_reader import read_committed

from offline_train.detector import KDSM
from streamer.lifecycle.control import connect
from streamer.lifecycle.thresholds import ThresholdStore
from streamer.pipeline.batch import RecordBatch
from streamer.pipeline.checkpoint import Send, TransactionalCheckpointer
from streamer.pipeline.fetcher import FetchProcess, FetchProcessExited, pack_batch, unpack_batch


def committed_offset(s) -> int | None:
    c = KafkaConsumer(bootstrap_servers=s.kafka.bootstrap, group_id=s.kafka.group_id, enable_auto_commit=False)
    try:
        return c.committed(TopicPartition(s.kafka.events_topic, 0))
    finally:
        c.close()


def test_a_frame_keeps_every_column_across_topics():
    rb = RecordBatch(["b", "a", "b"], np.array([2, 0, 1], np.int32), np.array([7, 3, 9]), np.array([-1, 5, 6]),
                     [b"k", None, b""], [None, b'{"x": 1}', b"\xff"], 3.25)
    epoch, back = unpack_batch(pack_batch(9, rb))
    assert epoch == 9 and back.topics == rb.topics and back.keys == rb.keys and back.values == rb.values
    assert back.partitions.tolist() == [2, 0, 1] and back.offsets.tolist() == [7, 3, 9]
    assert back.timestamps_ms.tolist() == [-1, 5, 6] and back.polled_at == 3.25
    assert back.commit_offsets() == rb.commit_offsets()
    assert back.headers is None  # no record has headers: no column travels
    rb.headers = [[], [("trace", b"t1"), ("trace", b"\xff"), ("null", None)], []]
    back = unpack_batch(pack_batch(9, rb))[1]
    assert [back.headers_at(i) for i in range(3)] == [(), [("trace", b"t1"), ("trace", b"\xff"), ("null", None)], ()]


@pytest.mark.integration
def test_batches_fetched_before_a_reassignment_are_dropped(kafka_bootstrap, redis_url, unique):
    s = make_settings(kafka_bootstrap, redis_url, unique, max_batch=50)
    create_topics(s)
    produce(s, [b"%d" % i for i in range(200)])
    tp = TopicPartition(s.kafka.events_topic, 0)
    f = FetchProcess(s.kafka, 50).start()
    try:
        f.assign({tp: 0})
        first = f.next_batch(20, 10000)  # a frame of up to 50 records, split: the rest starts the next batch
        assert first.offsets.tolist() == list(range(20))
        assert f.next_batch(30, 10000).offsets.tolist() == list(range(20, 50))
        time.sleep(1.0)  # the child fetches ahead: the rest of the topic waits in the pipe under epoch 1
        f.assign({tp: 120})
        got = []
        while len(got) < 80:
            rb = f.next_batch(50, 10000)
            assert len(rb), "no batch of the new epoch came"
            got.extend(rb.offsets.tolist())
        assert got == list(range(120, 200)) and f.dropped >= 1  # nothing of the old epoch slipped through
        f.assign({})
        assert len(f.next_batch(50, 500)) == 0
    finally:
        f.close()
    assert f._proc.poll() == 0  # stdin closed: the child exits on its own, cleanly


@pytest.mark.integration
def test_an_unreachable_broker_ends_the_fetch_process_with_one_line(kafka_bootstrap, redis_url, unique, capfd):
    s = make_settings("127.0.0.1:1", redis_url, unique)
    s.kafka.connect_timeout_s = 1
    f = FetchProcess(s.kafka, 50).start()
    try:
        with pytest.raises(FetchProcessExited, match=r"exited \(code 2\)"):
            f.assign({TopicPartition("t", 0): 0})
            f.next_batch(50, 15000)
    finally:
        f.close()
    err = capfd.readouterr().err
    assert '"event": "fetch_process_stopped"' in err and "unreachable" in err and "Traceback" not in err


@pytest.mark.integration
def test_a_killed_fetch_process_stops_the_streamer_and_a_restart_loses_nothing(tmp_path, kafka_bootstrap, redis_url,
                                                                               unique, tiny_model_dir):
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=100, fetch_process=True)
    create_topics(s)
    ThresholdStore(connect(redis_url), s.redis.key_prefix).set(model.version_, "warning", 0.0, None, "test", 1.0)
    cfg = str(tmp_path / "stream.yaml")
    write_stream_config(s, tmp_path / "stream.yaml")
    X = make_blobs(n=2400, seed=0)[0][1200:]
    values = [event(f"e{i}", x, model.feature_names_) for i, x in enumerate(X)]
    alerts = TopicReader(kafka_bootstrap, s.kafka.alerts_topic)
    log_path = tmp_path / "stream.log"
    log = open(log_path, "ab")
    proc = _start(cfg, str(tiny_model_dir), log)
    try:
        assert _wait_log(log_path, '"event": "partitions_assigned"', 1), log_path.read_text()[-3000:]
        producer = threading.Thread(target=produce_paced, args=(s, values, 40))
        producer.start()
        deadline = time.monotonic() + 40
        while len(alerts.poll()) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        child = fetch_pids(log_path)[0]
        os.kill(child, signal.SIGKILL)
        assert proc.wait(30) == 1, log_path.read_text()[-3000:]
        text = log_path.read_text()
        assert '"event": "fetch_process_exited"' in text and "Traceback" not in text, text[-3000:]
        assert len(alerts.poll()) < len(values), "the stream ended before the kill; nothing was tested"
        proc = _start(cfg, str(tiny_model_dir), log)
        deadline = time.monotonic() + 60
        while len({a["event_id"] for a in alerts.poll()}) < len(values) and time.monotonic() < deadline:
            time.sleep(0.05)
        producer.join(30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert _pid_gone(fetch_pids(log_path)[-1]), "the fetch process outlived its streamer's clean exit"
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    assert {a["event_id"] for a in alerts.poll()} == {f"e{i}" for i in range(len(values))}


@pytest.mark.integration
@pytest.mark.parametrize("fetch_process", [False, True], ids=["in-process", "fetch-process"])
def test_an_aborted_batch_is_read_again_and_committed_once(kafka_bootstrap, redis_url, unique, tiny_model_dir,
                                                           monkeypatch, fetch_process):
    """Exactly once in the loop: the first batch's transaction aborts (one of its sends refused, a failed future as
    kafka-python reports a broker's nack); the loop rewinds to the committed offsets, so the batch and what was
    fetched after it are read again (with the fetch process: under a new epoch) and every alert commits once."""
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=50,
                      fetch_process=fetch_process)
    s.kafka.delivery, s.kafka.transactional_id = "exactly_once", f"tx-{unique}"
    create_topics(s)
    ThresholdStore(connect(redis_url), s.redis.key_prefix).set(model.version_, "warning", 0.0, None, "test", 1.0)
    X = make_blobs(n=1600, seed=0)[0][1200:]
    refused = []
    original = TransactionalCheckpointer.add

    def add(self, batch):
        if not refused and batch.sends:
            refused.append(len(batch.sends))
            batch.sends.append(Send(s.kafka.alerts_topic, None, b"refused", Future().failure(RuntimeError("nack"))))
        return original(self, batch)

    monkeypatch.setattr(TransactionalCheckpointer, "add", add)
    sink = Collect()
    produce(s, [event(f"e{i}", x, model.feature_names_) for i, x in enumerate(X)])
    st = StreamerThread(s, sinks=[sink]).start()
    try:
        assert wait_for(lambda: sink.distinct() >= len(X), timeout=60), f"{sink.distinct()} of {len(X)} committed"
    finally:
        st.stop()
    assert refused and st.app.checkpoint.aborted_batches == 1
    assert sorted(sink.ids()) == sorted(f"e{i}" for i in range(len(X)))  # committed batches: each event once
    view = read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1)
    counts = Counter(json.loads(r.value)["event_id"] for r in view.records)
    assert set(counts) == {f"e{i}" for i in range(len(X))} and max(counts.values()) == 1
    assert view.aborted >= refused[0]  # the aborted batch's alerts were written, and left out
    if fetch_process:
        assert st.app.fetcher.epoch >= 2  # the assignment and the rewind (the first join revokes nothing since 9963054)


@pytest.mark.integration
def test_sigterm_to_the_process_group_drains_and_exits_0(tmp_path, kafka_bootstrap, redis_url, unique, tiny_model_dir):
    """A SIGTERM to the whole group (systemd's stop, `kill -TERM -PGID`) reached the fetch
    process too, which died of it: the streamer logged fetch_process_exited (code -15) and exited 1 without finishing
    its batch. The child ignores it now (it leaves when its stdin closes): the streamer drains, commits, exits 0."""
    model = KDSM.load(tiny_model_dir, device="cpu")
    # A batch gathers for up to a second at ~400 events/s: the signal finds the loop waiting on the child's pipe.
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=1000, max_wait_ms=1000,
                      fetch_process=True)
    create_topics(s)
    ThresholdStore(connect(redis_url), s.redis.key_prefix).set(model.version_, "warning", 0.0, None, "test", 1.0)
    cfg = write_stream_config(s, tmp_path / "stream.yaml")
    X = make_blobs(n=3600, seed=0)[0]
    values = [event(f"e{i}", x, model.feature_names_) for i, x in enumerate(X)]
    alerts = TopicReader(kafka_bootstrap, s.kafka.alerts_topic)
    log_path = tmp_path / "stream.log"
    log = open(log_path, "ab")
    proc = _start(cfg, str(tiny_model_dir), log)  # a session of its own: its group is the streamer and its child
    stop = threading.Event()
    producer = threading.Thread(target=produce_paced, args=(s, values, 40), kwargs={"stop": stop})
    try:
        assert _wait_log(log_path, '"event": "partitions_assigned"', 1), log_path.read_text()[-3000:]
        producer.start()
        deadline = time.monotonic() + 40
        while len(alerts.poll()) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(alerts.poll()) >= 200, log_path.read_text()[-3000:]
        child = fetch_pids(log_path)[0]
        # What the group's signal does to the child, ahead of the streamer's: the streamer reads on (the race the
        # group's signal may lose: the loop read the closed pipe before it saw its own signal, in half the runs).
        os.kill(child, signal.SIGTERM)
        time.sleep(1.0)
        assert proc.poll() is None and not _pid_gone(child, timeout=0.1), log_path.read_text()[-3000:]
        os.killpg(proc.pid, signal.SIGTERM)  # events still flowing
        assert proc.wait(30) == 0, log_path.read_text()[-3000:]
        assert _pid_gone(child), "the fetch process outlived its streamer"
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
        log.close()
        producer.join(30)
    text = log_path.read_text()
    assert "fetch_process_exited" not in text and "Traceback" not in text, text[-3000:]
    counts = json.loads(text.splitlines()[-1])  # kdsm stream prints its counts last
    assert counts["events"] < len(values), "the stream ended before the signal; nothing was tested"
    assert committed_offset(s) == counts["events"]  # every event taken was committed: the last batch too
