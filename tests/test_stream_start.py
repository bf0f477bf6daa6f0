"""The streamer's start against a real broker: what Kafka refuses there is one line (exit 2 in ``kdsm``), not a traceback,
and the clients built before it are closed."""

from __future__ import annotations

import logging
import os

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import (
    GroupAuthorizationFailedError,
    InvalidSessionTimeoutError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from stream_support import create_topics, make_settings

from streamer.ops.cli import user_errors
from streamer.pipeline.app import StreamApp
from streamer.pipeline.checkpoint import TransactionalCheckpointer
from streamer.pipeline.kafka_clients import KafkaStartError, KafkaUnavailable, ensure_topics
from streamer.pipeline.provider import StaticModelProvider

pytestmark = pytest.mark.integration


class _Events(logging.Handler):
    def __init__(self):
        super().__init__()
        self.events = []

    def emit(self, record):
        self.events.append(record.msg)


def test_a_refused_transactional_id_is_one_line_and_the_consumer_is_closed(kafka_bootstrap, redis_url, unique,
                                                                            tiny_model_dir, monkeypatch):
    """An ACL that refuses the transactional id (exactly once) raised kafka-python's error out of init_transactions:
    a traceback, exit 1, the consumer built before it left open."""
    s = make_settings(kafka_bootstrap, redis_url, unique)
    s.kafka.delivery, s.kafka.transactional_id = "exactly_once", f"tx-{unique}"
    create_topics(s)
    producers = []

    def refused(self):
        producers.append(self)
        raise TransactionalIdAuthorizationFailedError("Transactional Id authorization failed.")

    monkeypatch.setattr(KafkaProducer, "init_transactions", refused)  # what the broker answers such a principal
    app = StreamApp(s, StaticModelProvider(str(tiny_model_dir), "cpu"))
    with pytest.raises(KafkaUnavailable) as e:
        app.run()
    msg = str(e.value)
    assert isinstance(e.value, KafkaStartError) and isinstance(e.value, user_errors()), repr(e.value)
    assert msg.startswith(f"Kafka at {kafka_bootstrap}: initialising the transactions of 'tx-{unique}' "
                          "(kafka.transactional_id) failed: [Error 53] TransactionalIdAuthorizationFailedError") \
        and "ACLs" in msg and "\n" not in msg, msg
    assert app.consumer._closed and producers and producers[0]._closed


def test_a_kafka_error_later_in_the_start_is_one_line_and_every_client_is_closed(kafka_bootstrap, redis_url, unique,
                                                                                 tiny_model_dir, monkeypatch):
    """The start's other requests (the exactly-once warm-up's offsets, which need the group's ACL) raised
    kafka-python's error before the loop's try: a traceback, the clients left open."""
    s = make_settings(kafka_bootstrap, redis_url, unique)
    s.kafka.delivery, s.kafka.transactional_id = "exactly_once", f"tx-{unique}"
    create_topics(s)

    def refused(self, group_id, topics):
        raise GroupAuthorizationFailedError("Group authorization failed.")

    monkeypatch.setattr(TransactionalCheckpointer, "warm_up", refused)
    app = StreamApp(s, StaticModelProvider(str(tiny_model_dir), "cpu"))
    with pytest.raises(KafkaStartError) as e:
        app.run()
    msg = str(e.value)
    assert isinstance(e.value, user_errors()) and "\n" not in msg, msg
    assert msg.startswith(f"Kafka at {kafka_bootstrap}: the streamer's start failed: [Error 30] "
                          "GroupAuthorizationFailedError"), msg
    assert app.consumer._closed and app.producer._closed


@pytest.mark.parametrize("error,hint", [(GroupAuthorizationFailedError, "ACLs"),
                                        (InvalidSessionTimeoutError, "kafka.session_timeout_ms"),
                                        (TopicAuthorizationFailedError, "ACLs")])
def test_what_the_broker_refuses_at_the_first_poll_is_one_line(kafka_bootstrap, redis_url, unique, tiny_model_dir,
                                                                monkeypatch, error, hint):
    """At least once, nothing before the first poll asks the group coordinator: a group ACL, a session timeout outside
    the broker's bounds first surface in the loop's poll, which logged "crashed" with a traceback (exit 1)."""
    s = make_settings(kafka_bootstrap, redis_url, unique)
    create_topics(s)

    def refused(self, *args, **kwargs):
        raise error()

    monkeypatch.setattr(KafkaConsumer, "poll", refused)  # what kafka-python raises when the broker answers so
    events, log = _Events(), logging.getLogger("kdsm.stream")
    log.addHandler(events)
    app = StreamApp(s, StaticModelProvider(str(tiny_model_dir), "cpu"))
    try:
        with pytest.raises(KafkaStartError) as e:
            app.run()
    finally:
        log.removeHandler(events)
    msg = str(e.value)
    assert isinstance(e.value, user_errors()) and "\n" not in msg and error.__name__ in msg and hint in msg, msg
    assert msg.startswith(f"Kafka at {kafka_bootstrap}: consuming {s.kafka.events_topic} in group {s.kafka.group_id} "
                          "failed"), msg
    assert "crashed" not in [ev.get("event") for ev in events.events]
    assert app.consumer._closed and app.producer._closed


def test_a_refusal_inside_the_rebalance_listener_is_one_line(kafka_bootstrap, redis_url, unique, tiny_model_dir,
                                                              monkeypatch):
    """kafka-python wraps what the listener raises (its offset fetch, refused by a group ACL) in a KafkaError
    ("User rebalance callback throws an error"): it ended as a crashed traceback, exit 1."""
    import streamer.pipeline.app as app_module

    s = make_settings(kafka_bootstrap, redis_url, unique)
    create_topics(s)

    async def refused(self, assigned):
        raise GroupAuthorizationFailedError("offset fetch refused")

    monkeypatch.setattr(app_module._Rebalance, "_read_on_from_committed", refused)
    app = StreamApp(s, StaticModelProvider(str(tiny_model_dir), "cpu"))
    with pytest.raises(KafkaStartError) as e:
        app.run(max_events=1)
    assert isinstance(e.value, user_errors()) and "GroupAuthorizationFailedError" in str(e.value) \
        and "ACLs" in str(e.value), str(e.value)


def test_what_the_broker_refuses_the_fetch_process_is_one_line(kafka_bootstrap, redis_url, unique, tiny_model_dir,
                                                               tmp_path, monkeypatch):
    """With stream.fetch_process the child fetches the events topic: an ACL refusing it there crashed the child with a
    traceback and the streamer stopped with fetch_process_exited (exit 1). The child's consumer is refused here by a
    sitecustomize the child (only) loads, as the broker would refuse it."""
    from stream_support import produce

    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "if 'streamer.pipeline.fetcher' in open('/proc/self/cmdline', 'rb').read().decode(errors='replace'):\n"
        "    import kafka\n"
        "    from kafka.errors import TopicAuthorizationFailedError\n"
        "    def poll(self, *a, **k):\n"
        "        raise TopicAuthorizationFailedError()\n"
        "    kafka.KafkaConsumer.poll = poll\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    s = make_settings(kafka_bootstrap, redis_url, unique, fetch_process=True)
    create_topics(s)
    produce(s, [b'{"id": 1, "f0": 1, "f1": 1, "f2": 1, "f3": 1, "f4": 1, "f5": 1}'])
    app = StreamApp(s, StaticModelProvider(str(tiny_model_dir), "cpu"))
    with pytest.raises(KafkaStartError) as e:
        app.run(max_events=1)
    msg = str(e.value)
    assert isinstance(e.value, user_errors()) and "\n" not in msg, msg
    assert msg.startswith(f"Kafka at {kafka_bootstrap}: fetching {s.kafka.events_topic} (the fetch process) failed: "
                          "[Error 29] TopicAuthorizationFailedError"), msg
    assert "ACLs" in msg


def test_topics_the_cluster_will_not_list_are_logged_and_the_start_goes_on(kafka_bootstrap, redis_url, unique,
                                                                          monkeypatch):
    """ensure_topics logs what it cannot do (a cluster may forbid topic creation and have them already), but an error
    from listing the topics (an ACL without Describe) escaped it with a traceback."""
    s = make_settings(kafka_bootstrap, redis_url, unique)

    def refused(self):
        raise TopicAuthorizationFailedError()

    monkeypatch.setattr(KafkaAdminClient, "list_topics", refused)
    events, log = _Events(), logging.getLogger("kdsm.kafka")
    log.addHandler(events)
    try:
        assert ensure_topics(s.kafka, [s.kafka.alerts_topic]) == []
    finally:
        log.removeHandler(events)
    assert [e["event"] for e in events.events] == ["topic_admin_unavailable"]
    assert "TopicAuthorizationFailedError" in events.events[0]["error"]


def test_topics_are_created_with_the_brokers_replication_factor(kafka_bootstrap, redis_url, unique, monkeypatch):
    """Created with replication 1 until 2026-12-02: on a cluster with min.insync.replicas 2 every acks=all send to
    them was refused. -1 (the default) asks for the broker's default.replication.factor, one partition as before."""
    s = make_settings(kafka_bootstrap, redis_url, unique)
    assert s.kafka.topic_replication == -1
    topic = f"replicated-{unique}"
    asked, create = [], KafkaAdminClient.create_topics

    def recorded(self, new_topics, *args, **kwargs):
        asked.extend((t.name, t.num_partitions, t.replication_factor) for t in new_topics)
        return create(self, new_topics, *args, **kwargs)  # the real request to the real broker

    monkeypatch.setattr(KafkaAdminClient, "create_topics", recorded)
    assert ensure_topics(s.kafka, [topic]) == [topic]
    assert asked == [(topic, 1, -1)]
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        (described,) = admin.describe_topics([topic])
    finally:
        admin.close()
    assert described["error_code"] == 0 and len(described["partitions"]) == 1
    assert described["partitions"][0]["replica_nodes"]  # the broker's default: this single broker
    with pytest.raises(ValueError, match="replication factor"):
        type(s.kafka)(topic_replication=0)
    with pytest.raises(ValueError, match="less than or equal to 32767"):  # the protocol's int16: a traceback at start
        type(s.kafka)(topic_replication=40000)


def test_a_refusal_the_fetch_process_sent_is_read_even_when_a_command_meets_the_closed_pipe_first():
    """The child sends its refusal and exits; a rebalance's assign() wrote to it first, met the closed pipe, and the
    stream stopped with fetch_process_exited (exit 1) while the refusal sat unread in the batch pipe."""
    import subprocess
    from multiprocessing.connection import Connection

    from streamer.config import Settings
    from streamer.pipeline.fetcher import (
        _REFUSAL,
        FetchProcess,
        FetchProcessExited,
        FetchProcessRefused,
    )

    k = Settings().kafka
    fetcher = FetchProcess(k, max_batch=10)
    fetcher._proc = subprocess.Popen(["true"])  # a child that has exited
    read, write = os.pipe()
    fetcher._batches = Connection(read, writable=False)
    fetcher._commands = Connection(os.open(os.devnull, os.O_WRONLY), readable=False)
    Connection(write, readable=False).send_bytes(_REFUSAL + b"[Error 29] TopicAuthorizationFailedError")
    gone = fetcher._exited()
    assert isinstance(gone, FetchProcessRefused) and isinstance(gone, user_errors()), repr(gone)
    assert str(gone) == (f"Kafka at {k.bootstrap}: fetching {k.events_topic} (the fetch process) failed: "
                         "[Error 29] TopicAuthorizationFailedError")
    assert isinstance(fetcher._exited(), FetchProcessExited)  # nothing more in the pipe: the plain exit
    fetcher.close()
