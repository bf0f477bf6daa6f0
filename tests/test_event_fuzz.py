"""Bad events at the decoders: every one is scored or dead-lettered with a reason code, none raises, and the valid
events of its batch are decoded as if it were not there (numeric fast path, its json.loads reference, feature spec).

The standard: bad input never crashes a process and never loses data. An exception out of ``decode`` stops the
streamer before anything of the batch is published, and a restart reads the same event again.
"""

from __future__ import annotations

import json
import tracemalloc

import pyarrow as pa
import pytest

from offline_train.config import FeatureSpec
from offline_train.features import FittedFeatures, profile
from streamer.pipeline.deadletter import dead_letter
from streamer.pipeline.decode import REASONS, Decoder
from streamer.pipeline.decode_spec import SpecDecoder

NAMES = ["f0", "f1", "f2"]
OK = b'"f0": 1, "f1": 2.5, "f2": -3'


def _numeric() -> Decoder:
    return Decoder(NAMES, schema_hash="abc123", max_bytes=65536)


def _spec() -> SpecDecoder:
    specs = [FeatureSpec(name="f0", type="numeric"), FeatureSpec(name="f1", type="numeric"),
             FeatureSpec(name="f2", type="numeric"), FeatureSpec(name="kind", type="categorical"),
             FeatureSpec(name="flag", type="boolean"), FeatureSpec(name="c", path="geo.c", type="categorical")]
    n = 40
    t = pa.table({"f0": [float(i) for i in range(n)], "f1": [0.5] * n, "f2": [-1.0] * n, "kind": ["a", "b"] * (n // 2),
                  "flag": [True, False] * (n // 2), "geo": [{"c": "DE"}] * n})
    return SpecDecoder(FittedFeatures.fit(specs, profile(t.to_batches(), specs)), schema_hash="abc123",
                       max_bytes=65536)


SPEC_OK = OK + b', "kind": "a", "flag": true, "geo": {"c": "DE"}'


def _nested(depth: int, inner: bytes = b"") -> bytes:
    return b"[" * depth + inner + b"]" * depth


def _deeper(frames: int, fn, *args):
    """``fn(*args)`` called ``frames`` Python frames further down the stack (the streamer calls the decoder from
    inside its loop, the rebalance listener from deeper still)."""
    return fn(*args) if frames == 0 else _deeper(frames - 1, fn, *args)


def _valid(i: int, extra: bytes = OK) -> bytes:
    return b'{"id": "v%d", ' % i + extra + b"}"


def _check(dec: Decoder, bad: list[bytes | None], frames: int = 0, extra: bytes = OK) -> list:
    """Decode each bad event between two valid ones; return its outcome: 'scored' or its reason code."""
    outcomes = []
    for v in bad:
        out = _deeper(frames, dec.decode, [_valid(0, extra), v, _valid(1, extra)])
        assert 0 in out.rows.tolist() and 2 in out.rows.tolist(), "a valid neighbour was not decoded"
        assert out.ids[0] == "v0" and out.ids[-1] == "v1"
        assert all(r.index == 1 and r.reason in REASONS and r.message for r in out.rejects)
        if 1 in out.rows.tolist():
            assert not out.rejects
            outcomes.append("scored")
        else:
            assert len(out.rejects) == 1, "the bad event was neither scored nor dead-lettered"
            outcomes.append(out.rejects[0].reason)
    return outcomes


# ------------------------------------------------------------------------------------------------ nesting depth
@pytest.mark.parametrize("frames", [0, 40, 150])
def test_an_escape_in_an_event_nested_near_the_parser_limit_never_raises(frames):
    # json.loads parses a value nested nearly as deep as the stack allows; the lone-surrogate check that follows a
    # \\u escape re-encoded it with json.dumps a few frames deeper, which raised RecursionError at one depth (which
    # one depends on how deep the caller is). Every depth up to past the limit, at several caller depths.
    dec = _numeric()
    for inner in (b'"\\u00e9"', b'"\\ud800"'):
        bad = [b'{"id": 1, ' + OK + b', "x": ' + _nested(d, inner) + b"}" for d in range(700, 1030)]
        outcomes = _check(dec, bad, frames)
        assert set(outcomes) <= {"scored", "invalid_json"}
        if inner == b'"\\ud800"':  # a lone surrogate is never scored, however deep it sits
            assert set(outcomes) == {"invalid_json"}
        else:
            assert outcomes[0] == "scored" and outcomes[-1] == "invalid_json"


@pytest.mark.parametrize("decoder", ["numeric", "spec"])
def test_a_deeply_nested_schema_hash_is_a_schema_mismatch(decoder):
    # The schema_mismatch message quoted the event's schema value with str(), which walks all of it: orjson (the
    # spec decoder's parser) reads 1024 levels, so a 2 KB event with a schema nested 1000 deep stopped the streamer.
    dec, extra = (_numeric(), OK) if decoder == "numeric" else (_spec(), SPEC_OK)
    bad = [b'{"id": 1, ' + extra + b', "schema": ' + _nested(d, inner) + b"}"
           for d in (1, 10, 500, 900, 990, 1000, 1023, 1030, 5000) for inner in (b"", b'"abc123"', b'{"a": 1}')]
    bad += [b'{"id": 1, ' + extra + b', "schema": ' + b'{"a": ' * d + b"1" + b"}" * d + b"}" for d in (900, 1000, 1023)]
    for frames in (0, 150):
        outcomes = _check(dec, bad, frames, extra)
        assert set(outcomes) <= {"schema_mismatch", "invalid_json"}
        assert outcomes[0] == "schema_mismatch"
    msg = dec.decode([b'{"id": 1, ' + extra + b', "schema": ' + _nested(1000) + b"}"]).rejects
    assert len(msg) == 1 and len(msg[0].message) < 200


@pytest.mark.parametrize("decoder", ["numeric", "spec"])
def test_deep_nesting_anywhere_is_never_an_exception(decoder):
    dec, extra = (_numeric(), OK) if decoder == "numeric" else (_spec(), SPEC_OK)
    bad = [_nested(100000)[:65000], b"[" * 65000, b'{"a":' * 13000, _nested(1023), _nested(1023, b'"\\ud800"')]
    for field in ("id", "ts", "f0", "kind", "flag", "geo"):
        for d in (1000, 1023, 1030):
            bad.append(b'{"id": 1, ' + extra + b', "%s": ' % field.encode() + _nested(d) + b"}")
    for frames in (0, 150):
        outcomes = _check(dec, bad, frames, extra)
        assert "scored" not in outcomes[:5]


# ------------------------------------------------------------------------------------------------ timestamps
@pytest.mark.parametrize("decoder", ["numeric", "spec"])
def test_a_timestamp_that_is_no_json_number_is_dead_lettered(decoder):
    # json.loads reads NaN, Infinity and 1e999 (an overflow) as floats; the event time is passed on untouched, but
    # no JSON can carry these: the alert said "event_time": null and the archive "nan". Features refuse them
    # (non_finite_feature); an event time now does too (invalid_timestamp).
    dec, extra = (_numeric(), OK) if decoder == "numeric" else (_spec(), SPEC_OK)
    bad = [b'{"id": 1, "ts": %s, ' % t + extra + b"}" for t in (b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e400")]
    assert _check(dec, bad, 0, extra) == ["invalid_timestamp"] * len(bad)
    if decoder == "numeric":
        for v in bad:
            ref = dec.decode_reference([v])
            assert [r.reason for r in ref.rejects] == ["invalid_timestamp"]


@pytest.mark.parametrize("decoder", ["numeric", "spec"])
def test_every_other_odd_timestamp_is_passed_on_as_it_came(decoder):
    dec, extra = (_numeric(), OK) if decoder == "numeric" else (_spec(), SPEC_OK)
    odd = [b"-5", b"0", b"1e20", b"1.7976931348623157e308", b'"not a date"', b'""', b'"9999-12-31T23:59:59Z"',
           b'"' + b"t" * 60000 + b'"']
    # Integers beyond 64 bits too: orjson (the spec decoder) reads one as the nearest float (10**23 as 1e23), so that
    # decoder reads such an event again with the reference parser; the int64 and uint64 bounds, and floats as large.
    odd += [b"100000000000000000000000", b"-18446744073709551617", b"18446744073709551616", b"-9223372036854775809",
            b"1" + b"0" * 308, b"-" + b"9" * 400, b"18446744073709551615", b"-9223372036854775808", b"1e19", b"-9.3e18",
            b"18446744073709551616.0"]
    for t in odd:
        out = dec.decode([b'{"id": 1, "ts": %s, ' % t + extra + b"}"])
        want = json.loads(t)
        assert not out.rejects and [(type(x), x) for x in out.ts] == [(type(want), want)], t[:40]


# ------------------------------------------------------------------------------------------------ the whole list
def _cases(extra: bytes) -> dict[str, bytes | None]:
    ok = extra
    big = 1 << 20
    return {
        "tombstone": None, "zero_bytes": b"", "whitespace": b"   ", "not_utf8": b'{"id": "\xff", ' + ok + b"}",
        "not_utf8_extra_key": b'{"\xfe": 1, "id": 1, ' + ok + b"}", "top_array": b"[1, 2, 3]", "top_string": b'"x"',
        "top_number": b"42", "top_null": b"null", "top_true": b"true", "deep_100000": b"[" * 100000,
        "fifty_mb": b'{"id": 1, "pad": "' + b"x" * (50 * big) + b'"}',
        "duplicate_keys": b'{"id": 1, "id": 2, ' + ok + b"}", "duplicate_feature": b'{"id": 1, ' + ok + b', "f0": "x"}',
        "nan_feature": b'{"id": 1, ' + ok.replace(b"2.5", b"NaN") + b"}",
        "inf_feature": b'{"id": 1, ' + ok.replace(b"2.5", b"-Infinity") + b"}",
        "float_overflow": b'{"id": 1, ' + ok.replace(b"2.5", b"1e400") + b"}",
        "int_overflow": b'{"id": 1, ' + ok.replace(b"2.5", b"1" + b"0" * 400) + b"}",
        "int_beyond_str_limit": b'{"id": 1, ' + ok.replace(b"2.5", b"1" + b"0" * 5000) + b"}",
        "minus_zero": b'{"id": 1, ' + ok.replace(b"2.5", b"-0.0") + b"}",
        "bool_feature": b'{"id": 1, ' + ok.replace(b"2.5", b"true") + b"}",
        "string_feature": b'{"id": 1, ' + ok.replace(b"2.5", b'"2.5"') + b"}",
        "missing_feature": b'{"id": 1, ' + ok.replace(b'"f1": 2.5, ', b"") + b"}",
        "extra_field": b'{"id": 1, "zzz": {"a": [1, 2]}, ' + ok + b"}",
        "id_number": b'{"id": 7, ' + ok + b"}", "id_list": b'{"id": [1], ' + ok + b"}",
        "id_null": b'{"id": null, ' + ok + b"}", "id_empty": b'{"id": "", ' + ok + b"}",
        "id_float": b'{"id": 1.0, ' + ok + b"}", "id_bool": b'{"id": false, ' + ok + b"}",
        "id_huge_int": b'{"id": ' + b"9" * 4000 + b", " + ok + b"}",
        "id_60k": b'{"id": "' + b"i" * 60000 + b'", ' + ok + b"}",
        "id_nul": b'{"id": "a\\u0000b", ' + ok + b"}",
        "schema_int": b'{"id": 1, "schema": 5, ' + ok + b"}", "schema_null": b'{"id": 1, "schema": null, ' + ok + b"}",
        "schema_object": b'{"id": 1, "schema": {"abc123": 1}, ' + ok + b"}",
        "schema_right": b'{"id": 1, "schema": "abc123", ' + ok + b"}",
    }


# What each case must become (None: scored); the spec decoder reads a few differently, as documented.
EXPECT = {"tombstone": "empty", "zero_bytes": "empty", "whitespace": "invalid_json", "not_utf8": "invalid_utf8",
          "not_utf8_extra_key": "invalid_utf8", "top_array": "not_an_object", "top_string": "not_an_object",
          "top_number": "not_an_object", "top_null": "not_an_object", "top_true": "not_an_object",
          "deep_100000": "oversized", "fifty_mb": "oversized", "duplicate_keys": None,
          "duplicate_feature": "non_numeric_feature", "nan_feature": "non_finite_feature",
          "inf_feature": "non_finite_feature", "float_overflow": "non_finite_feature",
          "int_overflow": "non_finite_feature", "int_beyond_str_limit": "invalid_json", "minus_zero": None,
          "bool_feature": "non_numeric_feature", "string_feature": "non_numeric_feature",
          "missing_feature": "missing_feature", "extra_field": None, "id_number": None, "id_list": "invalid_id",
          "id_null": "missing_id", "id_empty": None, "id_float": "invalid_id", "id_bool": "invalid_id",
          "id_huge_int": None, "id_60k": None, "id_nul": None, "schema_int": "schema_mismatch",
          "schema_null": "schema_mismatch", "schema_object": "schema_mismatch", "schema_right": None}


@pytest.mark.parametrize("decoder", ["numeric", "spec"])
def test_every_kind_of_bad_event_is_scored_or_dead_lettered_and_its_batch_goes_on(decoder):
    dec, extra = (_numeric(), OK) if decoder == "numeric" else (_spec(), SPEC_OK)
    cases = _cases(extra)
    assert set(cases) == set(EXPECT)
    got = dict(zip(cases, _check(dec, list(cases.values()), 0, extra), strict=True))
    assert got == {k: v or "scored" for k, v in EXPECT.items()}
    # All of them in one batch, between valid events: the same outcome each, every valid event decoded.
    values = []
    for i, v in enumerate(cases.values()):
        values += [_valid(i, extra), v]
    out = dec.decode(values)
    valid_rows = list(range(0, len(values), 2))
    assert set(valid_rows) <= set(out.rows.tolist())
    reasons = {r.index: r.reason for r in out.rejects}
    assert len(reasons) == len(out.rejects) and not set(reasons) & set(out.rows.tolist())
    assert set(reasons) | set(out.rows.tolist()) == set(range(len(values)))  # nothing dropped
    assert {k: reasons.get(2 * i + 1, "scored") for i, k in enumerate(cases)} == got


def test_the_same_id_twice_in_a_batch_is_two_events():
    dec = _numeric()
    out = dec.decode([b'{"id": 5, ' + OK + b"}", b'{"id": 5, ' + OK + b"}"])
    assert out.rows.tolist() == [0, 1] and out.ids == [5, 5]


# ------------------------------------------------------------------------------------------------ the dead letter
def test_a_huge_event_is_dead_lettered_in_bounded_memory():
    # Each byte kept takes a byte of the message or more, so no more than max_bytes of the payload can fit; the
    # whole value was escaped first (a 20 MB event of control bytes: 120 MB of JSON, over 200 MB at the peak).
    value = b'{"id": 1, "pad": "' + b"\x01" * (20 << 20) + b'"}'
    tracemalloc.start()
    try:
        out = dead_letter(value, "t", 0, 1, "oversized", "too big", 1, "v1", max_bytes=262144)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    m = json.loads(out)
    assert len(out) <= 262144 and m["payload_truncated"] and m["payload_bytes"] == len(value)
    assert m["payload"].startswith('{"id": 1, "pad": "\x01')
    assert peak < 16 * 262144, f"{peak / 2**20:.0f} MB to dead-letter a {len(value) >> 20} MB event"
