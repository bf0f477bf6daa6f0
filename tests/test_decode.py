"""Decoder unit tests: every malformed kind gets its reason; valid rows around them are decoded exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from stream_support import malformed_corpus

from streamer.pipeline.decode import REASONS, Decoder

NAMES = ["f0", "f1", "f2"]


def _decoder(**kw):
    return Decoder(NAMES, schema_hash="abc123", max_bytes=4096, **kw)


def test_corpus_has_at_least_20_kinds_and_known_reasons():
    corpus = malformed_corpus(NAMES, 4096)
    assert len({k for k, _, _ in corpus}) >= 20
    assert {r for _, _, r in corpus} <= set(REASONS)


CORPUS = malformed_corpus(NAMES, 4096)


@pytest.mark.parametrize("kind,value,reason", CORPUS, ids=[k for k, _, _ in CORPUS])
def test_each_malformed_kind_gets_its_reason(kind, value, reason):
    out = _decoder().decode([value])
    assert len(out.X) == 0
    assert [(r.index, r.reason) for r in out.rejects] == [(0, reason)]
    assert out.rejects[0].message


def test_valid_rows_around_malformed_ones_are_kept_in_order():
    rng = np.random.default_rng(0)
    corpus = malformed_corpus(NAMES, 4096)
    values, expect_rows, expect_X = [], [], []
    for j, (_, bad, _) in enumerate(corpus):
        x = rng.normal(size=3)
        expect_rows.append(len(values))
        expect_X.append(x)
        values.append(json.dumps({"id": j, "ts": 1.0 + j, **dict(zip(NAMES, x.tolist(), strict=True)), "extra": "ignored"}).encode())
        values.append(bad)
    out = _decoder().decode(values)
    assert out.rows.tolist() == expect_rows
    np.testing.assert_array_equal(out.X, np.array(expect_X))
    assert out.ids == list(range(len(corpus)))
    assert out.ts == [1.0 + j for j in range(len(corpus))]
    assert [r.reason for r in out.rejects] == [r for _, _, r in corpus]
    assert [r.index for r in out.rejects] == [i + 1 for i in expect_rows]


def test_ints_string_ids_and_matching_schema_are_valid():
    out = _decoder().decode([b'{"id": "a-1", "f0": 1, "f1": -2, "f2": 3.5, "schema": "abc123"}'])
    assert out.rejects == []
    assert out.X.tolist() == [[1.0, -2.0, 3.5]]
    assert out.ids == ["a-1"] and out.ts == [None]


def test_custom_field_names():
    d = Decoder(NAMES, id_field="event_id", ts_field="time")
    out = d.decode([b'{"event_id": 7, "time": "2026-01-01T00:00:00Z", "f0": 1, "f1": 2, "f2": 3}', b'{"id": 7, "f0": 1, "f1": 2, "f2": 3}'])
    assert out.ids == [7] and out.ts == ["2026-01-01T00:00:00Z"]
    assert [r.reason for r in out.rejects] == ["missing_id"]


def test_single_feature_model():
    out = Decoder(["only"]).decode([b'{"id": 1, "only": 2.5}', b'{"id": 2, "only": "x"}'])
    assert out.X.tolist() == [[2.5]]
    assert [r.reason for r in out.rejects] == ["non_numeric_feature"]


def test_empty_batch():
    out = _decoder().decode([])
    assert out.X.shape == (0, 3) and out.rejects == [] and out.ids == []


# ---------------------------------------------------------------- the msgspec fast path vs the json.loads reference
def _same(values, dec=None):
    """decode (msgspec fast path) and decode_reference (json.loads) agree exactly: rows, values, ids, ts, rejects."""
    d = dec or _decoder()
    fast, ref = d.decode(values), d.decode_reference(values)
    assert fast.rows.tolist() == ref.rows.tolist()
    assert fast.X.shape == ref.X.shape and fast.X.tobytes() == ref.X.tobytes()  # bit for bit
    assert [(type(i), i) for i in fast.ids] == [(type(i), i) for i in ref.ids]
    assert [(type(t), t) for t in fast.ts] == [(type(t), t) for t in ref.ts]
    assert [(r.index, r.reason, r.message) for r in fast.rejects] == [(r.index, r.reason, r.message) for r in ref.rejects]
    return fast


def test_fast_path_equals_reference_on_the_corpus_with_messages():
    _same([v for _, v, _ in CORPUS])
    for _, v, _ in CORPUS:
        _same([v])


# Texts msgspec (or orjson) and json.loads read differently, or where a naive fast path could drift from the reference.
EDGE = {
    "id_beyond_u64_is_a_valid_int": (b'{"id": 18446744073709551616, "f0": 1, "f1": 2, "f2": 3}', None),
    "id_below_i64_is_a_valid_int": (b'{"id": -9223372036854775809, "f0": 1, "f1": 2, "f2": 3}', None),
    "id_u64_max": (b'{"id": 18446744073709551615, "f0": 1, "f1": 2, "f2": 3}', None),
    "ts_big_int_stays_int": (b'{"id": 1, "ts": 100000000000000000000000, "f0": 1, "f1": 2, "f2": 3}', None),
    "ts_big_float": (b'{"id": 1, "ts": 1e30, "f0": 1, "f1": 2, "f2": 3}', None),
    "feature_big_int": (b'{"id": 1, "f0": 1000000000000000000000000000001, "f1": 2, "f2": 3}', None),
    "feature_u64_int": (b'{"id": 1, "f0": 18446744073709551615, "f1": 2, "f2": 3}', None),
    "feature_2p53_plus_1": (b'{"id": 1, "f0": 9007199254740993, "f1": 2, "f2": 3}', None),
    "feature_max_double": (b'{"id": 1, "f0": 1.7976931348623157e308, "f1": 2, "f2": 3}', None),
    "feature_subnormal": (b'{"id": 1, "f0": 4.9e-324, "f1": 1e-400, "f2": -0.0}', None),
    "nan_in_an_extra_key_is_valid": (b'{"id": 1, "x": NaN, "f0": 1, "f1": 2, "f2": 3}', None),
    "infinity_feature": (b'{"id": 1, "f0": Infinity, "f1": 2, "f2": 3}', "non_finite_feature"),
    "overflow_feature_negative": (b'{"id": 1, "f0": -1e999, "f1": 2, "f2": 3}', "non_finite_feature"),
    "lone_surrogate_id": (b'{"id": "\\ud800", "f0": 1, "f1": 2, "f2": 3}', "invalid_json"),
    "lone_surrogate_extra": (b'{"id": 1, "x": "\\udfff", "f0": 1, "f1": 2, "f2": 3}', "invalid_json"),
    "surrogate_pair_is_valid": (b'{"id": "\\ud83d\\ude00", "f0": 1, "f1": 2, "f2": 3}', None),
    "surrogate_bytes": (b'{"id": "\xed\xa0\x80", "f0": 1, "f1": 2, "f2": 3}', "invalid_utf8"),
    "overlong_utf8": (b'{"id": "\xc0\xaf", "f0": 1, "f1": 2, "f2": 3}', "invalid_utf8"),
    # msgspec reads extra keys without decoding them: their UTF-8 is checked apart.
    "invalid_utf8_in_an_extra_key": (b'{"id": 1, "x": "\xff", "f0": 1, "f1": 2, "f2": 3}', "invalid_utf8"),
    "surrogate_bytes_in_an_extra_key": (b'{"id": 1, "f0": 1, "f1": 2, "f2": 3, "x": "\xed\xa0\x80"}', "invalid_utf8"),
    "utf8_text_is_valid": ('{"id": "é-1", "x": "Grüße", "f0": 1, "f1": 2, "f2": 3}'.encode(), None),
    "int_feature_beyond_u64_negative": (b'{"id": 1, "f0": -18446744073709551617, "f1": 2, "f2": 3}', None),
    "ts_null": (b'{"id": 1, "ts": null, "f0": 1, "f1": 2, "f2": 3}', None),
    "schema_null": (b'{"id": 1, "schema": null, "f0": 1, "f1": 2, "f2": 3}', "schema_mismatch"),
    "feature_object": (b'{"id": 1, "f0": {"v": 1}, "f1": 2, "f2": 3}', "non_numeric_feature"),
    "duplicate_feature_last_wins": (b'{"id": 1, "f0": "x", "f1": 2, "f2": 3, "f0": 7}', None),
    "duplicate_feature_last_bad": (b'{"id": 1, "f0": 7, "f1": 2, "f2": 3, "f0": "x"}', "non_numeric_feature"),
    "duplicate_id_last_null": (b'{"id": 1, "f0": 7, "f1": 2, "f2": 3, "id": null}', "missing_id"),
    "escaped_key": (b'{"\\u0069d": 5, "f\\u0030": 1, "f1": 2, "f2": 3}', None),
    "bool_id": (b'{"id": true, "f0": 1, "f1": 2, "f2": 3}', "invalid_id"),
    "bool_ts": (b'{"id": 1, "ts": false, "f0": 1, "f1": 2, "f2": 3}', "invalid_timestamp"),
    "schema_number": (b'{"id": 1, "schema": 18446744073709551616, "f0": 1, "f1": 2, "f2": 3}', "schema_mismatch"),
    "schema_list": (b'{"id": 1, "schema": ["abc123"], "f0": 1, "f1": 2, "f2": 3}', "schema_mismatch"),
    "schema_ok": (b'{"id": 1, "schema": "abc123", "f0": 1, "f1": 2, "f2": 3}', None),
    "nul_after": (b'{"id": 1, "f0": 1, "f1": 2, "f2": 3}\x00', "invalid_json"),
    "trailing_comma": (b'{"id": 1, "f0": 1, "f1": 2, "f2": 3,}', "invalid_json"),
    "nested_600_extra": (b'{"id": 1, "f0": 1, "f1": 2, "f2": 3, "x": ' + b"[" * 600 + b"]" * 600 + b"}", None),
    "nested_1010_extra": (b'{"id": 1, "f0": 1, "f1": 2, "f2": 3, "x": ' + b"[" * 1010 + b"]" * 1010 + b"}", "invalid_json"),
    "long_flat_event": (b'{"id": 1, "f0": 1, "f1": 2, "f2": 3, "pad": "' + b"[{" * 700 + b'"}', None),
}


@pytest.mark.parametrize("name", list(EDGE))
def test_fast_path_defers_to_the_reference(name):
    value, reason = EDGE[name]
    out = _same([value])
    assert [r.reason for r in out.rejects] == ([reason] if reason else [])
    # and the same in a batch of clean events, at the start, middle and end
    clean = [json.dumps({"id": i, "f0": i, "f1": 0.5, "f2": -1.25}).encode() for i in range(5)]
    for at in (0, 2, 5):
        _same(clean[:at] + [value] + clean[at:])


def test_fast_path_equals_reference_on_random_floats_and_mutated_bytes():
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**63, size=4000, dtype=np.int64).view(np.float64)
    bits = bits[np.isfinite(bits)]
    values = [json.dumps({"id": i, "ts": float(t), "f0": float(a), "f1": float(b), "f2": int(c)}).encode()
              for i, (a, b, t, c) in enumerate(zip(bits, -bits[::-1], rng.normal(size=len(bits)) * 1e9,
                                                   rng.integers(-2**62, 2**62, size=len(bits)), strict=True))]
    assert len(_same(values).X) == len(values)
    # Random byte edits of valid events: every outcome (valid, any reason) must match the reference.
    base = [json.dumps({"id": i, "ts": 1.5, "f0": 1e-3 * i, "f1": -2, "f2": 3.25, "schema": "abc123"}).encode() for i in range(50)]
    alphabet = b'{}[]",:.-+eE0123456789 \\u\xff\xc3\xa9\x00nNaIfity'
    mutants = []
    for _ in range(3000):
        v = bytearray(base[rng.integers(len(base))])
        for _ in range(rng.integers(1, 4)):
            at = int(rng.integers(len(v) + 1))
            op = rng.integers(3)
            if op == 0 and len(v):
                del v[min(at, len(v) - 1)]
            elif op == 1:
                v.insert(at, alphabet[rng.integers(len(alphabet))])
            elif len(v):
                v[min(at, len(v) - 1)] = alphabet[rng.integers(len(alphabet))]
        mutants.append(bytes(v))
    out = _same(mutants)
    assert 0 < len(out.rejects) < len(mutants)  # both outcomes were exercised
    for k in range(0, len(mutants), 100):
        _same(mutants[k:k + 100] + base)


def test_custom_fields_and_no_schema_fast_path():
    d = Decoder(NAMES, id_field="event_id", ts_field="time")
    values = [b'{"event_id": 7, "time": "2026-01-01T00:00:00Z", "f0": 1, "f1": 2, "f2": 3, "schema": "any"}',
              b'{"id": 7, "f0": 1, "f1": 2, "f2": 3}', b'{"event_id": "e", "f0": 1.5, "f1": 2, "f2": 3}']
    out = _same(values, d)
    assert out.ids == [7, "e"] and [r.reason for r in out.rejects] == ["missing_id"]


def test_a_field_name_used_twice_takes_the_reference_path():
    # The id field is also a feature: no typed event can hold both, so every event goes the json.loads way.
    d = Decoder(["id", "f1"], schema_hash="abc123")
    values = [b'{"id": 3, "f1": 2}', b'{"id": "x", "f1": 2}', b'{"id": 4, "f1": 2.5, "schema": "abc123"}']
    out = _same(values, d)
    assert out.X.tolist() == [[3.0, 2.0], [4.0, 2.5]] and out.ids == [3, 4]
    assert [(r.index, r.reason) for r in out.rejects] == [(1, "non_numeric_feature")]


@pytest.mark.parametrize("names", [['temp "C"', "b"], ["path\\x", "b"], ["tab\there", "b"], ["a", "b"]],
                         ids=["quote", "backslash", "control", "plain"])
def test_a_feature_name_msgspec_cannot_rename_to_takes_the_reference_path(names):
    """A Parquet column may be named so (a model trains, saves and loads with it); msgspec refused to build the typed
    event (ValueError), which stopped the streamer at its first batch, at every restart. Custom id and ts fields too."""
    for id_field, ts_field in (("id", "ts"), ('event "id"', "t\\s")):
        d = Decoder(names, id_field=id_field, ts_field=ts_field)
        values = [json.dumps({id_field: 1, names[0]: 1.5, names[1]: 2, ts_field: 5}).encode(),
                  json.dumps({id_field: 2, names[1]: 2}).encode()]
        out = _same(values, d)
        assert out.X.tolist() == [[1.5, 2.0]] and out.ids == [1] and out.ts == [5]
        assert [(r.index, r.reason) for r in out.rejects] == [(1, "missing_feature")]
