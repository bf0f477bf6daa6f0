"""Alert messages without a broker: compact UTF-8 JSON with the documented fields, one per alert row."""

import json

import numpy as np
from kafka.consumer.fetcher import ConsumerRecord

from streamer.pipeline.alerts import alert_id, build_alerts
from streamer.pipeline.batch import RecordBatch
from streamer.pipeline.decode import Decoder
from streamer.pipeline.provider import StaticModelProvider
from streamer.pipeline.scorer import ConstantScorer

FIELDS = {"alert_id", "event_id", "event_time", "scored_at", "score", "p_value", "severity", "threshold",
          "model_version", "schema_hash", "source", "top_features"}


def test_alerts_are_compact_utf8_json_that_parse_to_the_documented_fields(tiny_model_dir):
    model = StaticModelProvider(str(tiny_model_dir), "cpu").current()
    names = model.feature_names_
    ids = ["é-0", 1, "plain", 2**63, "日本"]  # non-ASCII ids stay themselves; a big int id stays an int
    values = [json.dumps({"id": i, "ts": 1.5e12, **{n: 1e16 if k == 0 else -1e-7 for k, n in enumerate(names)}}).encode()
              for i in ids]
    rb = RecordBatch.from_records([ConsumerRecord("ev", 0, 0, 10 + k, 1, 0, None, v, [], None, -1, len(v), -1)
                                   for k, v in enumerate(values)])
    dec = Decoder(names, schema_hash=model.schema_hash_).decode(rb.values)
    th = dict(model.thresholds_)
    res = ConstantScorer(alert_share=1.0, top_features=2).score(model, dec.X, th)  # every row alerts
    out = build_alerts(rb, dec, res, model, th)
    assert len(out) == len(ids)
    for k, (key, value) in enumerate(out):
        assert b" " not in value  # compact: no separator spaces (no field here holds a space)
        msg = json.loads(value.decode("utf-8"))
        assert set(msg) == FIELDS and key.decode() == msg["alert_id"]
        assert msg["event_id"] == ids[k] and msg["event_time"] == 1.5e12
        assert msg["alert_id"] == alert_id("ev", 0, 10 + k, model.version_)
        assert msg["source"] == {"topic": "ev", "partition": 0, "offset": 10 + k}
        assert [f["value"] for f in msg["top_features"]] == [1e16, -1e-7]  # floats survive the text exactly
        assert msg["score"] == float(res.scores[res.alert_rows[k]]) and np.isfinite(msg["p_value"])
