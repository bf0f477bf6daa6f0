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
