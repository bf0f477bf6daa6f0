"""``kdsm replay`` with column types JSON lacks: timestamps, dates and times as ISO-8601 strings, decimals as floats,
the archive's ``kdsm_*`` columns left out, a column with no JSON form refused in one line before anything is sent.

Before: ``json.dumps`` met a ``datetime`` and the command ended in a traceback (``Object of type datetime is not JSON
serializable``), so the streamer's own archive files (``kdsm_kafka_ts``, ``kdsm_committed_at``) never replayed.
"""

from __future__ import annotations

import datetime
import decimal
import json
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from offline_train.data import DataError, read_table
from streamer.dev.replay import events_from_table, replay
from streamer.lifecycle.archive import META_COLUMNS, batch_table
from streamer.pipeline.decode import Decoder

MS = 1700000000123  # 2023-11-14T22:13:20.123Z


def _events(table, **kw):
    return [json.loads(v) for _, v in events_from_table(table, **kw)]


def test_temporal_and_decimal_columns_become_json(tmp_path):
    table = pa.table({
        "id": [1, 2],
        "ts": pa.array([MS, None], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        "paris": pa.array([MS, MS], pa.int64()).cast(pa.timestamp("ms", tz="Europe/Paris")),
        "naive_ns": pa.array([MS * 10**6 + 456789, 0], pa.int64()).cast(pa.timestamp("ns")),
        "day": pa.array([datetime.date(2024, 2, 29), None], pa.date32()),
        "at": pa.array([datetime.time(13, 5, 7, 250000), datetime.time(0)], pa.time64("us")),
        "amount": pa.array([decimal.Decimal("12.34"), decimal.Decimal("-0.50")], pa.decimal128(6, 2)),
        "nested": pa.array([{"when": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
                             "d": datetime.date(2024, 1, 2), "x": decimal.Decimal("1.5")}, None],
                           pa.struct([("when", pa.timestamp("us", tz="UTC")), ("d", pa.date32()),
                                      ("x", pa.decimal128(4, 1))])),
        "f0": [0.5, 1.0],
        "label": [0, 1],
    })
    path = tmp_path / "typed.parquet"
    pq.write_table(table, path)
    events = _events(read_table(path))  # through Parquet, as ``kdsm replay --data`` reads it
    assert events[0] == {
        "id": 1, "ts": "2023-11-14T22:13:20.123Z", "paris": "2023-11-14T22:13:20.123Z",
        "naive_ns": "2023-11-14T22:13:20.123456789", "day": "2024-02-29", "at": "13:05:07.250000", "amount": 12.34,
        "nested": {"when": "2024-01-02T03:04:05Z", "d": "2024-01-02", "x": 1.5}, "f0": 0.5}
    assert events[1]["ts"] is None and events[1]["day"] is None and events[1]["nested"] is None
    assert events[1]["amount"] == -0.5 and events[1]["naive_ns"] == "1970-01-01T00:00:00.000000000"
    assert datetime.datetime.fromisoformat(events[0]["ts"].replace("Z", "+00:00")).timestamp() == MS / 1000


def test_a_replayed_timestamp_column_is_read_by_the_decoder():
    table = pa.table({"id": [7], "ts": pa.array([MS], pa.int64()).cast(pa.timestamp("ms", tz="UTC")), "f0": [2.0]})
    values = [v for _, v in events_from_table(table)]
    dec = Decoder(["f0"])
    for out in (dec.decode(values), dec.decode_reference(values)):
        assert out.rejects == [] and out.ids == [7] and out.ts == ["2023-11-14T22:13:20.123Z"]
        assert out.X.tolist() == [[2.0]]


def test_an_archive_file_replays_as_the_events_it_recorded(tmp_path):
    n = 3
    batch = SimpleNamespace(
        feature_names=["a", "b"], X=np.arange(6, dtype=float).reshape(n, 2), scores=[0.1, 0.9, 0.5],
        severities=["none", "high", "low"], model_version="v1", schema_hash="h", topics=["t"] * n, partitions=[0] * n,
        offsets=[10, 11, 12], timestamps_ms=[MS, MS + 1, -1], committed_at=MS / 1000 + 5,
        event_ids=["e1", "e2", "e3"], event_ts=[1700000000.5, None, "2023-11-14T22:13:20Z"])
    path = tmp_path / "part-0.parquet"
    pq.write_table(batch_table(batch), path)
    table = read_table(path)
    assert set(META_COLUMNS) <= set(table.column_names)
    assert pa.types.is_timestamp(table.schema.field("kdsm_kafka_ts").type)
    keys = [k for k, _ in events_from_table(table)]
    events = _events(table)
    assert keys == [b"e1", b"e2", b"e3"]
    assert events == [{"id": "e1", "ts": "1700000000.5", "a": 0.0, "b": 1.0},
                      {"id": "e2", "ts": None, "a": 2.0, "b": 3.0},
                      {"id": "e3", "ts": "2023-11-14T22:13:20Z", "a": 4.0, "b": 5.0}]


@pytest.mark.parametrize(("column", "typ"), [
    (pa.array([b"\x00\x01", b"x"], pa.binary()), "binary"),
    (pa.array([b"ab", b"cd"], pa.binary(2)), "fixed_size_binary[2]"),
    (pa.array([b"a", b"b"], pa.large_binary()), "large_binary"),
    (pa.array([1, 2], pa.int64()).cast(pa.duration("s")), "duration[s]"),
    (pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())), "map<string, int64>"),
    (pa.array([{"blob": b"z"}, None], pa.struct([("blob", pa.binary())])), "struct<blob: binary>"),
    (pa.array([[b"z"], []], pa.list_(pa.binary())), "list<item: binary>"),
])
def test_a_column_with_no_json_form_is_refused_in_one_line(column, typ):
    table = pa.table({"id": [1, 2], "f0": [0.5, 1.0], "payload": column})
    with pytest.raises(DataError) as e:
        events_from_table(table)
    msg = str(e.value)
    assert "\n" not in msg and f"column 'payload' is {typ}" in msg and "no JSON form" in msg


def test_a_refused_column_in_the_label_or_archive_columns_is_not_sent_so_not_refused():
    table = pa.table({"id": [1], "label": pa.array([b"x"], pa.binary()),
                      "kdsm_topic": pa.array([b"t"], pa.binary())})
    assert _events(table) == [{"id": 1}]


def test_replay_refuses_before_reaching_a_broker(tmp_path, monkeypatch):
    path = tmp_path / "blob.parquet"
    pq.write_table(pa.table({"id": [1], "blob": pa.array([b"\xff"], pa.binary())}), path)

    def no_producer(_):
        raise AssertionError("a producer was made")

    monkeypatch.setattr("streamer.dev.replay.make_producer", no_producer)
    settings = SimpleNamespace(stream=SimpleNamespace(ts_field="ts", id_field="id"),
                               data=SimpleNamespace(label_column="label"), kafka=None)
    with pytest.raises(DataError, match="column 'blob' is binary"):
        replay(settings, str(path), "events")


def test_the_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    from streamer.ops.cli import main as kdsm

    path = tmp_path / "blob.parquet"
    pq.write_table(pa.table({"id": [1], "blob": pa.array([b"\xff"], pa.binary())}), path)
    assert kdsm(["replay", "--data", str(path), "--topic", "events"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "column 'blob' is binary" in err and len(err.strip().splitlines()) == 1
