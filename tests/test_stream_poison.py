"""Poison events against the real broker and Redis: no payload stops a partition, no finite value scores NaN.

Every valid event alerts (the warning threshold is set to 0 in Redis), so
"every valid event was scored" is checkable per event id on the alerts topic.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from conftest import make_blobs
from kafka import KafkaProducer
from stream_support import StreamerThread, create_topics, event, make_settings, read_topic, wait_for
from txn_reader import read_committed

from offline_train.detector import KDSM
from streamer.lifecycle.control import connect
from streamer.lifecycle.thresholds import ThresholdStore

pytestmark = pytest.mark.integration

MB = 1 << 20
PRODUCER_LIMIT = 1048576  # kafka-python's default max_request_size, which the streamer's producer keeps


def _alert_everything(s, model, redis_url):
    ThresholdStore(connect(redis_url), s.redis.key_prefix).set(model.version_, "warning", 0.0, None, "test", 1.0)


def _produce_big(s, values: list[bytes], keys: dict | None = None) -> None:
    """A producer that accepts records up to 16 MB (the dev broker takes them; the streamer's producer would not)."""
    p = KafkaProducer(bootstrap_servers=s.kafka.bootstrap, acks="all", max_request_size=16 * MB, linger_ms=5)
    for i, v in enumerate(values):
        p.send(s.kafka.events_topic, key=(keys or {}).get(i, f"k{i}".encode()), value=v)
    p.flush()
    p.close()


def _alerts_by_event(s, want: int, timeout: float) -> dict:
    got = read_topic(s.kafka.bootstrap, s.kafka.alerts_topic, want, timeout=timeout)
    out = {}
    for r in got:
        a = json.loads(r.value)
        out.setdefault(a["event_id"], a)  # judge each event by its first alert
    return out


def _alerts_once_settled(s, streamer, valid: list) -> dict:
    """The alerts by event id once every valid event has one (or the streamer died: asserted alive), within 60 s."""
    alerts = {}

    def settled():
        alerts.update(_alerts_by_event(s, len(valid), timeout=2))
        return set(valid) <= set(alerts) or not streamer.thread.is_alive()

    wait_for(settled, timeout=60, every=0.5)
    assert streamer.thread.is_alive(), f"the streamer exited: {streamer.error!r}"
    return alerts


def test_oversized_payloads_never_stop_the_partition(kafka_bootstrap, redis_url, unique, tiny_model_dir):
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=50)
    create_topics(s)
    _alert_everything(s, model, redis_url)
    X = make_blobs(n=1300, seed=0)[0][1200:]
    names = model.feature_names_
    big = {1 * MB: b'{"id": "big", "pad": "' + b"x" * MB + b'"}',  # text: truncated as text
           2 * MB: bytes(range(256)) * (2 * MB // 256),  # binary: base64 would grow it by a third
           10 * MB: b'{"id": "huge", "pad": "' + b"\x01" * (10 * MB) + b'"}'}  # JSON escapes a control byte as 6
    values, valid, big_offsets = [], [], {}
    for i, x in enumerate(X):
        values.append(event(f"v{i}", x, names))
        valid.append(f"v{i}")
        if i in (10, 40, 70):
            payload = list(big.values())[(10, 40, 70).index(i)]
            big_offsets[len(values)] = len(payload)
            values.append(payload)
    # A 2 MB key too: the dead letter keeps the original key, so the producer refuses it at send; its small
    # fallback record (key = the key's SHA-256) takes its place.
    big_key_offset = len(values)
    big_offsets[big_key_offset] = 2 * MB
    values.append(b"x" * (2 * MB))
    values += [event(f"w{i}", x, names) for i, x in enumerate(X[:20])]
    valid += [f"w{i}" for i in range(20)]
    _produce_big(s, values, keys={big_key_offset: b"K" * (2 * MB)})

    streamer = StreamerThread(s).start()
    try:
        alerts = _alerts_once_settled(s, streamer, valid)
        assert set(valid) <= set(alerts), f"{len(set(valid) - set(alerts))} valid events never alerted"
        assert all(math.isfinite(a["score"]) for a in alerts.values())
        dead = read_topic(s.kafka.bootstrap, s.kafka.deadletter_topic, len(big_offsets), timeout=20)
    finally:
        streamer.stop()
    by_offset = {json.loads(r.value)["source"]["offset"]: (json.loads(r.value), len(r.value), r.key) for r in dead}
    assert set(by_offset) == set(big_offsets)
    for off, size in big_offsets.items():
        d, n_bytes, key = by_offset[off]
        assert d["reason"] == "oversized"
        assert d["payload_bytes"] == size and d["payload_truncated"] is True
        assert n_bytes <= s.kafka.deadletter_max_bytes < PRODUCER_LIMIT
        assert d["payload_sha256"]
        if off == big_key_offset:
            assert "MessageSizeTooLargeError" in d["publish_fallback"]["error"]
            assert d["publish_fallback"]["left_out"] == ["payload"]
            assert key == hashlib.sha256(b"K" * (2 * MB)).hexdigest().encode()
        else:
            assert d["payload"] and "publish_fallback" not in d  # default: the first bytes are kept


EXTREME = {
    "f0=1e308": lambda d: [1e308] + [0.0] * (d - 1),
    "all=-1e300": lambda d: [-1e300] * d,
    "all=1e38": lambda d: [1e38] * d,
    "f0=-1e38": lambda d: [-1e38] + [0.0] * (d - 1),
    "all=3.4e38 (float32 max 3.4028e38)": lambda d: [3.4e38] * d,
    "all=-3.4e38": lambda d: [-3.4e38] * d,
    "all=1.2e-38 (float32 smallest normal)": lambda d: [1.2e-38] * d,
    "alternating +-1e300": lambda d: [(-1) ** j * 1e300 for j in range(d)],
}


def test_extreme_finite_values_alert_with_a_finite_score(kafka_bootstrap, redis_url, unique, tiny_model_dir):
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=50)
    create_topics(s)
    _alert_everything(s, model, redis_url)
    names = model.feature_names_
    X = make_blobs(n=1250, seed=0)[0][1200:]
    values, ids = [], []
    for i, x in enumerate(X):
        values.append(event(f"v{i}", x, names))
        ids.append(f"v{i}")
        if i < len(EXTREME):
            kind = list(EXTREME)[i]
            values.append(json.dumps({"id": kind, **dict(zip(names, EXTREME[kind](len(names)), strict=True))}).encode())
            ids.append(kind)
    _produce_big(s, values)
    streamer = StreamerThread(s).start()
    try:
        alerts = {}
        wait_for(lambda: set(ids) <= set(alerts.update(_alerts_by_event(s, len(ids), 2)) or alerts), timeout=40, every=0.5)
        dead = read_topic(s.kafka.bootstrap, s.kafka.deadletter_topic, 1, timeout=1)
    finally:
        streamer.stop()
    assert not dead, [json.loads(r.value)["reason"] for r in dead]
    missing = [k for k in ids if k not in alerts]
    assert not missing, f"no alert (a NaN score has no severity): {missing}"
    for kind in EXTREME:
        a = alerts[kind]
        assert math.isfinite(a["score"]), kind
        if max(abs(v) for v in EXTREME[kind](len(names))) > 1e30:
            # Values this far out are the clearest anomalies there are: the top severity, not a silent row.
            assert a["severity"] == "critical", (kind, a["score"])
        assert all(math.isfinite(f["expected"]) for f in a["top_features"]), kind
    assert np.isfinite([a["score"] for a in alerts.values()]).all()


def test_events_nested_to_the_parser_limit_and_odd_event_times_never_stop_the_streamer(kafka_bootstrap, redis_url,
                                                                                       unique, tiny_model_dir):
    # An extra field nested nearly as deep as json.loads goes, with a \u escape in it: the lone-surrogate check
    # re-encoded the object a few frames deeper than the parse and raised RecursionError at one depth (the streamer
    # exited, and a restart read the same event again). A NaN or infinite event time was scored and its alert said
    # "event_time": null; it is dead-lettered now. Every event ends as an alert (all valid ones alert here) or a
    # dead letter, and every valid one is scored.
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=50)
    create_topics(s)
    _alert_everything(s, model, redis_url)
    names = model.feature_names_
    X = make_blobs(n=1400, seed=0)[0][1200:]
    values, valid, deep, odd_ts = [], [], [], []
    depths = list(range(850, 1030))
    for i, x in enumerate(X):
        values.append(event(f"v{i}", x, names))
        valid.append(f"v{i}")
        if i < len(depths):
            d = depths[i]
            deep.append(len(values))
            values.append(event(f"d{d}", x, names, pad=0).replace(b'"pad": 0', b'"pad": ' + b"[" * d + b'"\\u00e9"' + b"]" * d))
        if i % 40 == 3:
            odd_ts.append(len(values))
            values.append(event(f"t{i}", x, names).replace(b'{"id"', b'{"ts": NaN, "id"'))
    _produce_big(s, values)
    streamer = StreamerThread(s).start()
    try:
        alerts, dead = {}, {}

        def settled():
            alerts.update(_alerts_by_event(s, len(values), timeout=2))
            for r in read_topic(s.kafka.bootstrap, s.kafka.deadletter_topic, len(values), timeout=1):
                m = json.loads(r.value)
                dead[m["source"]["offset"]] = m
            return len(alerts) + len(dead) >= len(values) or not streamer.thread.is_alive()

        wait_for(settled, timeout=60, every=0.5)
        assert streamer.thread.is_alive(), f"the streamer exited: {streamer.error!r}"
    finally:
        streamer.stop()
    assert set(valid) <= set(alerts), f"{len(set(valid) - set(alerts))} valid events never alerted"
    for off in deep:
        d = depths[deep.index(off)]
        assert (f"d{d}" in alerts) != (off in dead), f"depth {d}: alerted and dead-lettered, or neither"
        if off in dead:
            assert dead[off]["reason"] == "invalid_json", dead[off]
    assert all(dead.get(off, {}).get("reason") == "invalid_timestamp" for off in odd_ts), [dead.get(o) for o in odd_ts]
    assert len(alerts) + len(dead) == len(values)


TRACE = ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")


@pytest.mark.parametrize(("fetch_process", "delivery"),
                         [(False, "at_least_once"), (True, "at_least_once"), (True, "exactly_once")],
                         ids=["in-process", "fetch-process", "fetch-process-exactly-once"])
def test_a_dead_letter_carries_the_events_headers(kafka_bootstrap, redis_url, unique, tiny_model_dir, fetch_process,
                                                  delivery):
    """A reader who traces events by header finds them on the dead letter: in order, duplicates and binary values
    as they came, through the fetch process's pipe too. Headers too large for the dead letter's budget (half of
    ``deadletter_max_bytes``) are left out whole and counted in ``kdsm.headers_left_out``, appended last; a fallback
    record (a 2 MB key) keeps the short ones; value and headers stay within ``deadletter_max_bytes``."""
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=50,
                      fetch_process=fetch_process)
    if delivery == "exactly_once":
        s.kafka.delivery, s.kafka.transactional_id = "exactly_once", f"tx-{unique}"
    create_topics(s)
    _alert_everything(s, model, redis_url)
    names = model.feature_names_
    X = make_blobs(n=1300, seed=0)[0][1200:]
    left_out = ("kdsm.headers_left_out", b"1")
    blob = ("blob", b"x" * 200_000)  # over half of the 256 KiB budget
    bad = {  # after valid event i: (key, value, headers, the headers its dead letter must carry)
        10: (b"a", b"not json", [TRACE, ("schema", b"\x00\xffv2"), ("dup", b"1"), ("dup", b"2"), ("empty", b"")], None),
        20: (b"b", b"not json", [], []),
        30: (b"c", b"not json", [blob, TRACE], [TRACE, left_out]),  # the trace id after the blob is still kept
        40: (b"d", b'{"id": "big", "pad": "' + b"x" * MB + b'"}', [TRACE, ("note", b"n" * 100_000)], None),
        50: (b"K" * (2 * MB), b"not json", [TRACE, ("note", b"n" * 1000)], [TRACE, left_out]),  # its fallback record
        60: (b"e", b"not json", [("kdsm.headers_left_out", b"7"), blob], [("kdsm.headers_left_out", b"7"), left_out]),
    }
    records, valid, expected = [], [], {}
    for i, x in enumerate(X):
        # Valid events with and without headers: a batch's headers column is mixed.
        records.append((f"k{i}".encode(), event(f"v{i}", x, names), [TRACE] if i % 2 else []))
        valid.append(f"v{i}")
        if i in bad:
            key, value, headers, want = bad[i]
            expected[len(records)] = (key, headers if want is None else want)
            records.append((key, value, headers))
    p = KafkaProducer(bootstrap_servers=s.kafka.bootstrap, acks="all", max_request_size=16 * MB, linger_ms=5)
    for key, value, headers in records:
        p.send(s.kafka.events_topic, key=key, value=value, headers=headers)
    p.flush()
    p.close()

    streamer = StreamerThread(s).start()
    try:
        _alerts_once_settled(s, streamer, valid)
    finally:
        streamer.stop()
    if delivery == "exactly_once":  # what a read_committed reader sees: every dead letter committed, once
        view = read_committed(kafka_bootstrap, s.kafka.deadletter_topic, 1)
        dead, uncommitted = view.records, view.aborted + view.open
        assert uncommitted == 0, (view.aborted, view.open)
    else:
        dead = read_topic(s.kafka.bootstrap, s.kafka.deadletter_topic, len(expected), timeout=20)
    by_offset = {json.loads(r.value)["source"]["offset"]: r for r in dead}
    assert len(dead) == len(by_offset) and set(by_offset) == set(expected)
    for off, (key, want) in expected.items():
        r = by_offset[off]
        d = json.loads(r.value)
        assert [(n, bytes(v)) for n, v in r.headers] == want, (off, r.headers[:4])
        assert len(r.value) + sum(len(n.encode()) + len(v) for n, v in r.headers) <= s.kafka.deadletter_max_bytes
        if len(key) > 256:
            assert "MessageSizeTooLargeError" in d["publish_fallback"]["error"]
            assert r.key == hashlib.sha256(key).hexdigest().encode()
        else:
            assert "publish_fallback" not in d and r.key == key
            assert d["reason"] == ("oversized" if d["payload_bytes"] > s.kafka.max_event_bytes else "invalid_json")
    big = json.loads(by_offset[next(o for o, (k, _) in expected.items() if k == b"d")].value)
    assert big["payload_truncated"] is True and big["payload"]  # the payload took what the headers left
    # stream.alert_headers is empty by default: the alerts of events with a trace id carry no header.
    alert_msgs = read_topic(s.kafka.bootstrap, s.kafka.alerts_topic, len(valid), timeout=10)
    assert {json.loads(r.value)["event_id"] for r in alert_msgs} >= set(valid)  # read them all, then none has a header
    assert all(not r.headers for r in alert_msgs)


@pytest.mark.parametrize(("fetch_process", "delivery"),
                         [(False, "at_least_once"), (True, "at_least_once"), (True, "exactly_once")],
                         ids=["in-process", "fetch-process", "fetch-process-exactly-once"])
def test_an_alert_carries_the_event_headers_named_in_alert_headers(kafka_bootstrap, redis_url, unique, tiny_model_dir,
                                                                   fetch_process, delivery):
    """A subscriber that follows a trace finds its id on the alert: the event's headers named in
    ``stream.alert_headers`` (exactly), in order, duplicates included, each whole; none other (an ``auth`` header
    stays behind); one too large for the 16 KiB budget is left out and counted in ``kdsm.headers_left_out``."""
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=16,
                      fetch_process=fetch_process)
    s.stream.alert_headers = ["traceparent", "tracestate"]
    if delivery == "exactly_once":
        s.kafka.delivery, s.kafka.transactional_id = "exactly_once", f"tx-{unique}"
    create_topics(s)
    _alert_everything(s, model, redis_url)
    names = model.feature_names_
    X = make_blobs(n=1300, seed=0)[0][1200:1240]
    state = ("tracestate", b"congo=t61rcWkgMzE")
    kinds = [  # (the event's headers, the alert's)
        ([], []),
        ([TRACE], [TRACE]),
        ([("auth", b"secret"), TRACE, state, ("traceparent", b"\x00\xff")], [TRACE, state, ("traceparent", b"\x00\xff")]),
        ([("TraceParent", b"x"), ("other", b"y")], []),  # names match exactly: none of these
        ([("traceparent", b"t" * 20_000), TRACE], [TRACE, ("kdsm.headers_left_out", b"1")]),
        ([("tracestate", b""), ("traceparent", b"")], [("tracestate", b""), ("traceparent", b"")]),  # empty values
    ]
    want = {}
    p = KafkaProducer(bootstrap_servers=s.kafka.bootstrap, acks="all", linger_ms=5)
    for i, x in enumerate(X):
        headers, want[f"v{i}"] = kinds[i % len(kinds)]
        p.send(s.kafka.events_topic, key=f"k{i}".encode(), value=event(f"v{i}", x, names), headers=headers)
    p.send(s.kafka.events_topic, key=b"bad", value=b"not json", headers=[TRACE, ("auth", b"secret")])
    p.flush()
    p.close()

    streamer = StreamerThread(s).start()
    try:
        assert wait_for(lambda: set(_alerts_by_event(s, len(want), timeout=2)) >= set(want)
                        or not streamer.thread.is_alive(), timeout=60, every=0.5)
        assert streamer.thread.is_alive(), f"the streamer exited: {streamer.error!r}"
    finally:
        streamer.stop()
    if delivery == "exactly_once":
        view = read_committed(kafka_bootstrap, s.kafka.alerts_topic, 1)
        got, uncommitted = view.records, view.aborted + view.open
        assert uncommitted == 0, (view.aborted, view.open)
    else:
        got = read_topic(s.kafka.bootstrap, s.kafka.alerts_topic, len(want), timeout=20)
    seen = set()
    for r in got:
        eid = json.loads(r.value)["event_id"]
        assert [(n, bytes(v)) for n, v in r.headers] == want[eid], (eid, r.headers)
        seen.add(eid)
    assert seen == set(want)
    # The dead letter carries every original header, as before (alert_headers names an alert's only).
    dead = read_topic(s.kafka.bootstrap, s.kafka.deadletter_topic, 1, timeout=10)
    assert dead and all([(n, bytes(v)) for n, v in r.headers] == [TRACE, ("auth", b"secret")] for r in dead)


class _RawName(str):
    """A header name kafka-python's producer writes as these bytes: not UTF-8 (a C producer can write one)."""

    def encode(self, *a, **k):
        return b"\xff\xfe"


@pytest.mark.parametrize(("fetch_process", "partitions", "delivery"),
                         [(False, 1, "at_least_once"), (False, 2, "at_least_once"), (True, 1, "at_least_once"),
                          (True, 2, "at_least_once"), (False, 2, "exactly_once")],
                         ids=["in-process", "in-process-2-partitions", "fetch-process", "fetch-process-2-partitions",
                              "in-process-2-partitions-exactly-once"])
def test_a_record_kafka_python_cannot_read_is_dead_lettered_not_a_poison_pill(kafka_bootstrap, redis_url, unique,
                                                                              tiny_model_dir, fetch_process, partitions,
                                                                              delivery):
    """A record whose header name is not UTF-8 makes kafka-python's poll raise CorruptRecordError, again at every
    poll (the position stays on it): the streamer crashed, and a restart met it again. It is dead-lettered now
    (``corrupt_record``, no payload: the record cannot be read), the streamer reads on past it, every valid event
    before and after it alerts, and the streamer stays alive."""
    model = KDSM.load(tiny_model_dir, device="cpu")
    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(tiny_model_dir), max_batch=50,
                      fetch_process=fetch_process)
    if delivery == "exactly_once":
        s.kafka.delivery, s.kafka.transactional_id = "exactly_once", f"tx-{unique}"
    create_topics(s, partitions=partitions)
    _alert_everything(s, model, redis_url)
    names = model.feature_names_
    X = make_blobs(n=1300, seed=0)[0][1200:]
    p = KafkaProducer(bootstrap_servers=s.kafka.bootstrap, acks="all")
    valid, corrupt = [], []
    for i, x in enumerate(X):
        part = i % partitions
        p.send(s.kafka.events_topic, event(f"v{i}", x, names), key=f"k{i}".encode(), partition=part).get(10)
        valid.append(f"v{i}")
        if i in (9, 55, 56):  # two in a row too: the second is met right after seeking past the first
            md = p.send(s.kafka.events_topic, b'{"a": 1}', key=b"bad", partition=part,
                        headers=[(_RawName("xx"), b"v")]).get(10)
            corrupt.append((md.partition, md.offset))
    p.close()

    streamer = StreamerThread(s).start()
    try:
        alerts, dead = {}, {}

        def settled():
            alerts.update(_alerts_by_event(s, len(valid), timeout=2))
            for r in read_topic(s.kafka.bootstrap, s.kafka.deadletter_topic, len(corrupt), timeout=1):
                m = json.loads(r.value)
                dead[(m["source"]["partition"], m["source"]["offset"])] = m
            return (set(valid) <= set(alerts) and len(dead) >= len(corrupt)) or not streamer.thread.is_alive()

        wait_for(settled, timeout=60, every=0.5)
        assert streamer.thread.is_alive(), f"the streamer exited: {streamer.error!r}"
    finally:
        streamer.stop()
    assert set(valid) <= set(alerts), f"{len(set(valid) - set(alerts))} valid events never alerted"
    assert sorted(dead) == sorted(corrupt), (sorted(dead), corrupt)
    if delivery == "exactly_once":  # what a read_committed reader sees: each dead letter committed, once
        view = read_committed(kafka_bootstrap, s.kafka.deadletter_topic, partitions)
        assert view.aborted + view.open == 0 and len(view.records) == len(corrupt), (view.aborted, view.open)
    for m in dead.values():
        assert m["reason"] == "corrupt_record", m
        assert "UnicodeDecodeError" in m["message"] and m["payload"] is None and m["payload_encoding"] == "none", m
