"""Helpers for the streaming integration tests (real Tansu broker, real Redis; nothing mocked)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import yaml
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from streamer.config import Settings


def make_settings(kafka_bootstrap: str, redis_url: str, unique: str, model: str | None = None, **stream) -> Settings:
    s = Settings()
    s.kafka.bootstrap = kafka_bootstrap
    s.kafka.events_topic = f"ev-{unique}"
    s.kafka.alerts_topic = f"al-{unique}"
    s.kafka.deadletter_topic = f"dl-{unique}"
    s.kafka.group_id = f"g-{unique}"
    s.kafka.session_timeout_ms = 6000
    s.kafka.heartbeat_interval_ms = 1000
    s.redis.url = redis_url
    s.redis.key_prefix = f"kdsm-test-{unique}:"
    s.metrics.port = 0
    s.stream.max_wait_ms = 50
    s.stream.model = model
    for k, v in stream.items():
        setattr(s.stream, k, v)
    return s


def write_stream_config(s: Settings, path: Path, **sections) -> str:
    """A ``kdsm stream --config`` file for ``s`` (kafka, redis, stream; metrics on a free port) plus ``sections``."""
    path.write_text(yaml.safe_dump({"kafka": s.kafka.model_dump(mode="json"), "redis": s.redis.model_dump(mode="json"),
                                    "stream": s.stream.model_dump(mode="json"), "metrics": {"port": 0}, **sections}))
    return str(path)


def produce_paced(s: Settings, values: list, per_flush: int, pause_s: float = 0.1,
                  stop: threading.Event | None = None, sent: list | None = None) -> None:
    """Produce ``values`` (keys k0, k1, ...) in flushed bursts of ``per_flush`` with a pause between,
    so a kill in a crash test lands mid-stream.

    With ``stop``, production ends at the first burst boundary after it is set, so a test can keep events
    flowing until it has done what it needs; how many were sent (all flushed) is appended to ``sent``.
    """
    from streamer.pipeline.kafka_clients import make_producer

    p = make_producer(s.kafka)
    n = 0
    for i, v in enumerate(values):
        p.send(s.kafka.events_topic, key=f"k{i}".encode(), value=v)
        n = i + 1
        if i % per_flush == per_flush - 1:
            p.flush()
            if stop is not None and stop.is_set():
                break
            time.sleep(pause_s)
    p.flush()
    p.close()
    if sent is not None:
        sent.append(n)


def create_topics(s: Settings, partitions: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=s.kafka.bootstrap)
    try:
        admin.create_topics([NewTopic(t, partitions, 1) for t in (s.kafka.events_topic, s.kafka.alerts_topic, s.kafka.deadletter_topic)])
    finally:
        admin.close()


def produce(s: Settings, values: list, keys: list | None = None, topic: str | None = None) -> None:
    p = KafkaProducer(bootstrap_servers=s.kafka.bootstrap, acks="all", linger_ms=5)
    for i, v in enumerate(values):
        p.send(topic or s.kafka.events_topic, key=f"k{i}".encode() if keys is None else keys[i], value=v)
    p.flush()
    p.close()


def event(i, x, names, **extra) -> bytes:
    return json.dumps({"id": i, **{n: float(v) for n, v in zip(names, x, strict=True)}, **extra}).encode()


def read_topic(bootstrap: str, topic: str, want: int, timeout: float = 20.0, partitions: int | None = None) -> list:
    """Every record of ``topic`` from the start, until ``want`` arrived or ``timeout`` passed."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        deadline = time.monotonic() + timeout
        parts = None
        while parts is None and time.monotonic() < deadline:
            parts = c.partitions_for_topic(topic)
            if not parts:
                parts = None
                time.sleep(0.1)
        if not parts:
            return []
        c.assign([TopicPartition(topic, p) for p in sorted(parts)])
        c.seek_to_beginning()
        out = []
        while len(out) < want and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(recs)
        return out
    finally:
        c.close()


class StreamerThread:
    """``run_stream`` in a thread; ``stop()`` asks it to finish the batch, drain and close."""

    def __init__(self, s: Settings, sinks=(), max_events=None, provider=None):
        from streamer.service import build_app

        self.app, self.server = build_app(s, s.stream.model, provider=provider, sinks=sinks)
        self.result = None
        self.error = None
        self.max_events = max_events
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.result = self.app.run(max_events=self.max_events)
        except BaseException as e:  # noqa: BLE001 - surfaced by stop()
            self.error = e
        finally:
            self.app.thresholds.stop()
            if self.server:
                self.server.stop()

    def start(self, wait_assigned: float = 20.0):
        self.thread.start()
        if wait_assigned and not self.app.ready.wait(wait_assigned):
            raise AssertionError("streamer got no partitions assignment in time")
        return self

    def stop(self, timeout: float = 20.0):
        self.app.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "streamer did not stop"
        if self.error:
            raise self.error
        return self.result


def wait_for(pred, timeout: float = 15.0, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    return pred()


class Collect:
    """A sink that keeps every committed ScoredBatch."""

    def __init__(self):
        self.batches = []
        self.lock = threading.Lock()

    def on_committed(self, batch):
        with self.lock:
            self.batches.append(batch)

    def ids(self):
        with self.lock:
            return [i for b in self.batches for i in b.event_ids]

    def distinct(self) -> int:
        """How many different events were committed: a redelivery (at least once) must not count twice."""
        return len(set(self.ids()))


def malformed_corpus(names: list[str], max_bytes: int = 65536) -> list[tuple[str, bytes | None, str]]:
    """(kind, raw value, expected reason) for at least 20 kinds of events that cannot be scored."""
    ok = {n: 0.5 for n in names}

    def obj(**kw):
        return json.dumps({"id": "bad", **ok, **kw}).encode()

    without_first = {k: v for k, v in ok.items() if k != names[0]}
    return [
        ("tombstone", None, "empty"),
        ("zero_bytes", b"", "empty"),
        ("oversized", b'{"id": 1, "pad": "' + b"x" * max_bytes + b'"}', "oversized"),
        ("latin1_bytes", b'{"id": "caf\xe9"}', "invalid_utf8"),
        ("utf16", '{"id": 1}'.encode("utf-16"), "invalid_utf8"),
        ("truncated_json", obj()[:-5], "invalid_json"),
        ("plain_text", b"hello world", "invalid_json"),
        ("single_quotes", b"{'id': 1}", "invalid_json"),
        ("deep_nesting", b"[" * 1500 + b"]" * 1500, "invalid_json"),
        ("utf8_bom", b"\xef\xbb\xbf" + obj(), "invalid_json"),
        # json.loads accepts an escaped lone surrogate; no alert, archive row or dead letter could encode it as UTF-8
        ("lone_surrogate_id", obj().replace(b'"bad"', b'"\\ud800"', 1), "invalid_json"),
        ("lone_surrogate_timestamp", obj(ts="x").replace(b'"x"', b'"\\udc00"', 1), "invalid_json"),
        ("json_array", json.dumps([0.5] * len(names)).encode(), "not_an_object"),
        ("json_string", b'"event"', "not_an_object"),
        ("json_number", b"42", "not_an_object"),
        ("json_null", b"null", "not_an_object"),
        ("missing_id", json.dumps(ok).encode(), "missing_id"),
        ("null_id", json.dumps({"id": None, **ok}).encode(), "missing_id"),
        ("object_id", json.dumps({"id": {"a": 1}, **ok}).encode(), "invalid_id"),
        ("float_id", json.dumps({"id": 1.5, **ok}).encode(), "invalid_id"),
        ("list_timestamp", obj(ts=[1, 2]), "invalid_timestamp"),
        ("wrong_schema", obj(schema="not-this-model"), "schema_mismatch"),
        ("missing_feature", json.dumps({"id": 1, **without_first}).encode(), "missing_feature"),
        ("no_features", b'{"id": 1}', "missing_feature"),
        ("string_feature", obj(**{names[0]: "abc"}), "non_numeric_feature"),
        ("numeric_string_feature", obj(**{names[0]: "1.5"}), "non_numeric_feature"),
        ("null_feature", obj(**{names[0]: None}), "non_numeric_feature"),
        ("bool_feature", obj(**{names[0]: True}), "non_numeric_feature"),
        ("list_feature", obj(**{names[0]: [1.0]}), "non_numeric_feature"),
        ("object_feature", obj(**{names[0]: {"v": 1}}), "non_numeric_feature"),
        ("nan_feature", obj(**{names[0]: float("nan")}), "non_finite_feature"),
        ("inf_feature", obj(**{names[0]: float("inf")}), "non_finite_feature"),
        ("neg_inf_feature", obj(**{names[-1]: float("-inf")}), "non_finite_feature"),
        ("overflow_float", obj().replace(b"0.5", b"1e999", 1), "non_finite_feature"),
        ("huge_int", obj().replace(b"0.5", b"1" + b"0" * 400, 1), "non_finite_feature"),
    ]


def kill_and_close(procs: list, files: list) -> None:
    """A test's ``finally``: kill the streamer processes still running, close their log files."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for f in files:
        f.close()
