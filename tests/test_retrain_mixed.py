"""Retraining a feature-spec model from the archive (real Redis): the new model keeps the spec that encoded it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_features import mixed_table
from test_retrain import overrides
from test_stream_mixed import SPEC

from offline_train.config import load_settings
from offline_train.detector import KDSM
from offline_train.job import train_job
from streamer.config import Settings
from streamer.lifecycle.archive import ArchiveSink, example_batch
from streamer.lifecycle.config import ArchiveConfig
from streamer.lifecycle.registry import ModelRegistry
from streamer.lifecycle.retrain import run_retrain

pytestmark = pytest.mark.integration


def test_retrain_of_a_spec_model_keeps_its_spec_and_schema(tmp_path, redis_url, unique):
    s = load_settings(Settings, None, **overrides(tmp_path, redis_url, unique))
    s.features = SPEC
    pq.write_table(mixed_table(1200, seed=3), tmp_path / "train.parquet")
    train_job(s, tmp_path / "train.parquet", tmp_path / "v0", progress=False, log=lambda m: None)
    s.features = None  # retraining reads the archive (encoded columns), not the spec's raw fields
    reg = ModelRegistry.from_settings(s)
    v0 = reg.add(tmp_path / "v0")
    reg.promote(v0)
    cur = KDSM.load(tmp_path / "v0", device="cpu")
    # The archive as the streamer writes it: the encoded rows of scored events, one column per encoded column.
    X = cur.features_.encode_records(mixed_table(1500, seed=4).to_pylist()).X
    sink = ArchiveSink(ArchiveConfig(dir=s.archive.dir, fsync=False), background=False)
    for i in range(0, len(X), 500):
        b = example_batch(500, features=tuple(cur.feature_names_), offset0=i, version=cur.version_)
        b.X, b.schema_hash = X[i:i + 500], cur.schema_hash_
        sink.on_committed(b)
        sink.flush()
    sink.close()
    res = run_retrain(s, reg, reason="test")
    assert res.version, res.reason
    new = KDSM.load(reg.store.local_path(res.version), device="cpu")
    assert new.features_ is not None and new.schema_hash_ == cur.schema_hash_
    assert new.feature_names_ == cur.feature_names_
    event = {"amount": 20.0, "merchant_category": "grocery", "card_present": True, "geo": {"country": "DE", "distance_km": 1.0}}
    assert np.isfinite(new.decision_function(new.features_.encode_records([event]).X)).all()
    assert Path(reg.store.local_path(res.version), "metadata.json").read_text().count('"feature_spec"') == 1
    # The spec's category columns are scaled as categories in the retrained model too: a column that never left its
    # value in the window (no event of the archive had an unseen category) stands 1/sqrt(n) wide, not 1, so an event
    # with a category never seen still reaches critical (the spec was set after the fit: it scored below warning).
    j = new.feature_names_.index("merchant_category=<unseen>")
    assert not X[:, j].any()
    assert new.scaler_.std_[j] < 0.1 and cur.scaler_.std_[j] < 0.1
    unseen = {**event, "merchant_category": "NEVER-SEEN"}
    assert new.severity(new.decision_function(new.features_.encode_records([unseen]).X))[0] == "critical"
