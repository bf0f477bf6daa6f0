"""``kdsm replay``: produce the rows of a Parquet file as JSON events, optionally at a fixed rate.

Each row becomes one flat JSON object: every column except the label
column (ids = row numbers when there is no id column), plus the timestamp
field set to the send time (unix seconds) when the file has none. The Kafka key is the event id. Labels are never sent:
the stream must not see them.

>>> rows = events_from_table(pa.table({"id": [1, 2], "f0": [0.5, 1.0], "label": [0, 1]}), "id", "ts", "label")
>>> [json.loads(r[1]) for r in rows]
[{'id': 1, 'f0': 0.5}, {'id': 2, 'f0': 1.0}]
"""

from __future__ import annotations

import json
import math
import time

import pyarrow as pa

from offline_train.data import read_table
from streamer.pipeline.kafka_clients import make_producer


def events_from_table(table: pa.Table, id_field: str = "id", ts_field: str = "ts", label_column: str | None = "label",
                      id_offset: int = 0) -> list[tuple[bytes, bytes]]:
    """(key, JSON value) per row; ids are the row numbers (+ ``id_offset``) when the table has no id column."""
    cols = [c for c in table.column_names if c != label_column]
    rows = table.select(cols).to_pylist()
    out = []
    for i, r in enumerate(rows):
        if id_field not in r:
            r = {id_field: i + id_offset, **r}
        out.append((str(r[id_field]).encode(), _dumps(r)))
    return out


def _dumps(r: dict) -> bytes:
    return json.dumps(r, separators=(",", ":"), allow_nan=True).encode()


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

