"""Mixed events end to end against the real broker and Redis (nothing mocked).

Train from a Parquet file with string, boolean, null and nested columns under a
feature spec; stream the same kind of events as JSON; alerts name categorical
features in the user's terms; missing fields are imputed or dead-lettered per
policy; type changes dead-letter with a reason; unseen categories are scored.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from stream_support import (
    Collect,
    StreamerThread,
    create_topics,
    make_settings,
    produce,
    read_topic,
    wait_for,
)
from test_features import mixed_table

from offline_train.config import FeatureSpec
from offline_train.detector import KDSM
from offline_train.job import train_job

pytestmark = pytest.mark.integration

SPEC = [FeatureSpec(name="amount", type="numeric", log1p=True),
        FeatureSpec(name="merchant_category", type="categorical"),
        FeatureSpec(name="card_present", type="boolean"),
        FeatureSpec(name="device_id", type="categorical", missing="impute"),
        FeatureSpec(name="country", path="geo.country", type="categorical"),
        FeatureSpec(name="distance_km", path="geo.distance_km", type="numeric", missing="impute")]


@pytest.fixture(scope="module")
def mixed_model(tmp_path_factory):
    from streamer.config import Settings

    work = tmp_path_factory.mktemp("mixed")
    pq.write_table(mixed_table(1500, seed=3), work / "train.parquet")
    s = Settings()
    s.model.width, s.model.depth = 64, 2
    s.train.steps = 400
    s.features = SPEC
    train_job(s, work / "train.parquet", work / "model", progress=False, log=lambda m: None)
    return work / "model"


def test_mixed_events_score_alert_in_user_terms_and_follow_missing_policies(kafka_bootstrap, redis_url, unique, mixed_model):
    det = KDSM.load(mixed_model, device="cpu")
    assert det.features_ is not None and "merchant_category=<unseen>" in det.feature_names_
    rows = mixed_table(300, seed=9).to_pylist()  # the training distribution, as JSON events
    normal = [dict(r, id=f"n{i}", ts=1700000000 + i) for i, r in enumerate(rows)]
    for r in normal[::3]:
        del r["device_id"]  # an optional field removed upstream: imputed (mode + indicator), scored
        r["extra"] = {"new_field": [1, 2]}  # unknown fields are ignored
    planted = [dict(r, id=f"p{i}", merchant_category="crypto", geo={"country": "KP", "distance_km": 2.0})
               for i, r in enumerate(rows[:15])]  # unseen categories: scored, never dead-lettered
    bad = [({k: v for k, v in rows[0].items() if k != "amount"} | {"id": "b0"}, "missing_feature"),  # reject policy
           (rows[1] | {"id": "b1", "amount": None}, "missing_feature"),
           (rows[2] | {"id": "b2", "amount": {"value": 12}}, "non_numeric_feature"),  # a number arriving as an object
           (rows[3] | {"id": "b3", "merchant_category": 4.5}, "type_mismatch"),
           (rows[4] | {"id": "b4", "geo": "DE"}, "type_mismatch"),  # the nested object became a string
           (rows[5] | {"id": "b5", "card_present": "yes"}, "type_mismatch"),
           (rows[6] | {"id": "b6", "schema": "another-spec"}, "schema_mismatch")]
    values = []
    for i, ev in enumerate(normal):
        values.append(json.dumps(ev).encode())
        if i % 20 == 5 and planted:
            values.append(json.dumps(planted.pop(0)).encode())
        if i % 40 == 7 and len(values) and bad and i // 40 < len(bad):
            values.append(json.dumps(bad[i // 40][0]).encode())
    sent_bad = [b for b in bad if json.dumps(b[0]).encode() in values]
    assert len(sent_bad) == len(bad) and not planted
    planted_ids = [f"p{i}" for i in range(15)]
    valid = [e["id"] for e in normal] + planted_ids
    # A producer that stamps the model's schema hash (the spec's) is accepted.
    values.append(json.dumps(rows[7] | {"id": "s0", "schema": det.schema_hash_}).encode())
    valid.append("s0")

    s = make_settings(kafka_bootstrap, redis_url, unique, model=str(mixed_model), max_batch=64)
    create_topics(s)
    sink = Collect()
    st = StreamerThread(s, sinks=[sink]).start()
    try:
        produce(s, values)
        assert wait_for(lambda: len(sink.ids()) >= len(valid), timeout=40), "not every valid event was committed"
    finally:
        st.stop()

    assert sorted(sink.ids()) == sorted(valid)  # imputed, unseen and extra-field events all scored
    dead = [json.loads(r.value) for r in read_topic(kafka_bootstrap, s.kafka.deadletter_topic, len(bad))]
    assert sorted(d["reason"] for d in dead) == sorted(r for _, r in bad) and all(d["message"] for d in dead)
    # The archive-facing batch carries the encoded matrix: an event without device_id holds its missing indicator.
    batches = {i: (b, k) for b in sink.batches for k, i in enumerate(b.event_ids)}
    b, k = batches["n0"]
    assert b.X[k, b.feature_names.index("device_id:missing")] == 1.0 and b.schema_hash == det.schema_hash_

    alerts = {a["event_id"]: a for a in (json.loads(r.value) for r in read_topic(kafka_bootstrap, s.kafka.alerts_topic, 15))}
    got = [alerts[p] for p in planted_ids if p in alerts]
    assert len(got) >= 12, f"only {len(got)} of 15 unseen-category events alerted"
    for a in got:
        top = a["top_features"]
        assert all("=" not in t["name"] and ":" not in t["name"] for t in top)  # features, not encoded columns
        assert top[0]["name"] in ("merchant_category", "country")  # the categorical feature explains the alert
        cat = next(t for t in top if t["name"] == "merchant_category")
        assert cat["value"] == "crypto" and cat["text"] == f'merchant_category = "crypto" (expected "{cat["expected"]}")'
        assert cat["expected"] in ("grocery", "fuel", "travel")
    # An alerted event without device_id (removed upstream or null) explains its indicator as "device_id missing"
    # (15 of 33 alerts in one run had it among their top features); an event with one never does.
    events = {e["id"]: e for e in map(json.loads, values)}
    said_missing = {k for k, a in alerts.items() if "device_id missing" in [t["text"] for t in a["top_features"]]}
    assert said_missing, "no alert names device_id missing"
    assert all(events[k].get("device_id") is None for k in said_missing)
    assert all(t["value"] is None for k in said_missing for t in alerts[k]["top_features"] if t["text"] == "device_id missing")
    normal_alerts = [k for k in alerts if k.startswith("n")]
    assert len(normal_alerts) <= 0.08 * len(normal)
    np.testing.assert_allclose(
        [alerts[p]["score"] for p in planted_ids if p in alerts],
        det.decision_function(det.features_.encode_records(
            [json.loads(v) for v in values if json.loads(v).get("id") in alerts and json.loads(v)["id"].startswith("p")]).X),
        rtol=1e-5)
