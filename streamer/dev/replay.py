"""``kdsm replay``: produce the rows of a Parquet file as JSON events, optionally at a fixed rate.

Each row becomes one flat JSON object: every column except the label
column (ids = row numbers when there is no id column), plus the timestamp
field set to the send time (unix seconds) when the file has none. The Kafka key is the event id. Labels are never sent:
the stream must not see them, nor are the archive's own ``kdsm_*`` columns (``archive.META_COLUMNS``: score,
severity, offsets, Kafka and commit times), so an archive file replays as the events it recorded (its ``id`` and
``ts``, which the archive keeps as strings, as strings).

Column types JSON lacks: timestamps, dates and times become ISO-8601 strings (a time zone's timestamp in UTC,
``2023-11-14T22:13:20.123Z``; a naive one without offset), decimals become floats. The decoder takes an event time
as a number or a string and passes it on unread (``decode.event_decoder``: ``int | float | str | None``), so a
replayed ``ts`` column is accepted as it is. A column with no JSON form (binary, duration, interval, map, or a
nested type holding one) is refused before anything is sent: ``DataError``, one line naming the column and its type.

>>> rows = events_from_table(pa.table({"id": [1, 2], "f0": [0.5, 1.0], "label": [0, 1]}), "id", "ts", "label")
>>> [json.loads(r[1]) for r in rows]
[{'id': 1, 'f0': 0.5}, {'id': 2, 'f0': 1.0}]
>>> ts = pa.array([1700000000123], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
>>> events_from_table(pa.table({"id": [1], "ts": ts, "kdsm_kafka_ts": ts}))[0][1]
b'{"id":1,"ts":"2023-11-14T22:13:20.123Z"}'
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import time

import pyarrow as pa
import pyarrow.compute as pc

from offline_train.data import DataError, read_table
from streamer.lifecycle.archive import META_COLUMNS
from streamer.pipeline.kafka_clients import make_producer


def events_from_table(table: pa.Table, id_field: str = "id", ts_field: str = "ts", label_column: str | None = "label",
                      id_offset: int = 0) -> list[tuple[bytes, bytes]]:
    """(key, JSON value) per row; ids are the row numbers (+ ``id_offset``) when the table has no id column.

    Raises ``DataError`` (one line: the column and its type) for a column with no JSON form, before any row is built.
    """
    cols = [c for c in table.column_names if c != label_column and c not in META_COLUMNS]
    for name in cols:
        _check_sendable(name, table.schema.field(name).type)
    data = {name: _pylist(name, table.column(name)) for name in cols}
    rows = [dict(zip(cols, vals, strict=True)) for vals in zip(*data.values(), strict=True)] if cols else \
        [{} for _ in range(table.num_rows)]
    out = []
    for i, r in enumerate(rows):
        if id_field not in r:
            r = {id_field: i + id_offset, **r}
        out.append((str(r[id_field]).encode(), _dumps(r)))
    return out


_is_binary_view = getattr(pa.types, "is_binary_view", lambda t: False)  # pyarrow >= 16; pyproject allows 15


def _no_json_form(t: pa.DataType) -> bool:
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or _is_binary_view(t) or pa.types.is_duration(t) or pa.types.is_interval(t) or pa.types.is_map(t)):
        return True
    if pa.types.is_dictionary(t):
        return _no_json_form(t.value_type)
    return any(_no_json_form(t.field(i).type) for i in range(t.num_fields))  # list, struct, union children


def _check_sendable(name: str, t: pa.DataType) -> None:
    if _no_json_form(t):
        raise DataError(f"column {name!r} is {t}, which has no JSON form; cast it (e.g. to string) or drop it "
                        "before replaying")


def _json_ready(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A top-level temporal column as ISO-8601 strings (any unit, nanoseconds and years past 9999 included, which
    ``to_pylist`` cannot make datetimes of), a decimal one as floats; others as they are."""
    t = col.type
    if pa.types.is_timestamp(t):
        if t.tz is not None:  # "...Z" rather than a local time with a "+0100" offset
            col = col.cast(pa.timestamp(t.unit, "UTC"))
        return pc.replace_substring(col.cast(pa.string()), " ", "T", max_replacements=1)
    if pa.types.is_date(t) or pa.types.is_time(t):
        return col.cast(pa.string())
    if pa.types.is_decimal(t):
        return col.cast(pa.float64())
    return col


def _pylist(name: str, col: pa.ChunkedArray) -> list:
    try:
        return _json_ready(col).to_pylist()
    except (ValueError, OverflowError) as e:  # e.g. a nested nanosecond timestamp Python cannot hold
        raise DataError(f"column {name!r} ({col.type}): {e}") from None


def _default(o):
    """Temporal and decimal values nested in a list or struct column (top-level ones are converted by Arrow)."""
    if isinstance(o, datetime.datetime) and o.tzinfo is not None:
        return o.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(o, (datetime.date, datetime.time)):  # datetime is a date
        return o.isoformat()
    if isinstance(o, decimal.Decimal):
        return float(o)
    raise TypeError(f"{type(o).__name__} has no JSON form")


def _dumps(r: dict) -> bytes:
    return json.dumps(r, separators=(",", ":"), allow_nan=True, default=_default).encode()


def replay(settings, data, topic: str, rate: float | None = None, limit: int | None = None, repeat: int = 1,
           log=print) -> dict:
    """Send the rows of ``data`` to ``topic`` (``repeat`` times), at ``rate`` events/s if given; returns counts."""
    table = read_table(data)
    ts_field = settings.stream.ts_field
    stamp = ts_field not in table.column_names
    events = events_from_table(table, settings.stream.id_field, ts_field, settings.data.label_column)
    if limit is not None:
        events = events[:limit]
    producer = make_producer(settings.kafka)
    sent, t0 = 0, time.monotonic()
    chunk = max(1, int(rate / 50)) if rate else 1000  # rate limiting in 20 ms steps
    try:
        for _ in range(repeat):
            for i in range(0, len(events), chunk):
                now = time.time()
                for key, value in events[i:i + chunk]:
                    if stamp:  # append the send time to the object, no re-serialisation
                        value = value[:-1] + f',"{ts_field}":{now:.3f}}}'.encode()
                    producer.send(topic, key=key, value=value)
                sent += len(events[i:i + chunk])
                if rate:
                    ahead = sent / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        producer.flush()
    finally:
        producer.close()
    seconds = time.monotonic() - t0
    out = {"sent": sent, "seconds": round(seconds, 3), "rate": round(sent / seconds, 1) if seconds > 0 else math.inf,
           "topic": topic}
    log(json.dumps(out))
    return out

