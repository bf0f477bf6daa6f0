"""The feature spec (offline_train.features): inference, fitting, the one transform offline and online, explanations."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stream_support import malformed_corpus

from offline_train.artifact import ArtifactError, schema_hash
from offline_train.config import FeatureSpec, ModelConfig, OptimConfig, TrainSettings, load_settings
from offline_train.data import DataError, ParquetSource
from offline_train.detector import KDSM
from offline_train.features import FittedFeatures, profile
from streamer.ops.cli import main
from streamer.pipeline.decode import REASONS, Decoder
from streamer.pipeline.decode_spec import SpecDecoder


def mixed_table(n: int = 600, seed: int = 0) -> pa.Table:
    """Payments: numbers, a category, a boolean, an optional field with nulls, a nested object, an id column."""
    rng = np.random.default_rng(seed)
    cat = rng.choice(["grocery", "fuel", "travel"], n, p=[0.6, 0.25, 0.15])
    amount = np.round(rng.lognormal(3, 0.4, n), 2)
    device = [None if i % 5 == 0 else str(rng.choice(["ios", "android"])) for i in range(n)]
    geo = [{"country": str(rng.choice(["DE", "FR"])), "distance_km": float(rng.exponential(5))} for _ in range(n)]
    for i in range(0, n, 9):
        geo[i]["distance_km"] = None
    return pa.table({"id": [f"e{i}" for i in range(n)], "amount": amount, "merchant_category": cat,
                     "card_present": rng.random(n) < 0.7, "device_id": device, "geo": geo,
                     "txn_uuid": [f"u{rng.integers(1 << 40)}-{i}" for i in range(n + 600)][:n],
                     "label": np.zeros(n, np.int64)})


@pytest.fixture
def mixed_parquet(tmp_path):
    path = tmp_path / "mixed.parquet"
    pq.write_table(mixed_table(1200), path)
    return path


def test_inference_types_nesting_nulls_and_identifiers(mixed_parquet):
    src = ParquetSource(mixed_parquet)
    got = {s.name: (s.type, s.path, s.missing) for s in src.specs}
    assert got == {"amount": ("numeric", None, "reject"), "merchant_category": ("categorical", None, "reject"),
                   "card_present": ("boolean", None, "reject"), "device_id": ("categorical", None, "impute"),
                   "geo.country": ("categorical", "geo.country", "reject"),
                   "geo.distance_km": ("numeric", "geo.distance_km", "impute")}
    assert any(w.startswith("txn_uuid:") and "identifier" in w for w in src.left_out)  # 1200 distinct strings
    assert src.encoder is not None
    assert "merchant_category=grocery" in src.features and "merchant_category=<unseen>" in src.features
    assert "device_id:missing" in src.features and "geo.distance_km:missing" in src.features


def test_features_infer_prints_yaml_that_configures_training(mixed_parquet, tmp_path, capsys):
    assert main(["features", "infer", "--data", str(mixed_parquet)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# left out: txn_uuid") and "features:" in text
    cfg = tmp_path / "spec.yaml"
    cfg.write_text(text)
    specs = load_settings(TrainSettings, cfg).features
    assert [s.name for s in specs] == [s.name for s in ParquetSource(mixed_parquet).specs]
    assert main(["features", "infer", "--data", str(tmp_path / "nope.parquet")]) == 2


@pytest.mark.parametrize("with_strings", [False, True], ids=["numeric", "mixed"])
def test_a_column_with_no_value_is_left_out_with_a_comment(tmp_path, capsys, with_strings):
    """One all-null numeric column refused the whole data set ("feature 'allnull': no value in the training data to
    learn from"), for kdsm train and kdsm features infer, while a column of the null type was left out with a
    comment. Now it is left out the same way; a spec that names it still refuses it in one line."""
    n = 300
    rng = np.random.default_rng(0)
    cols = {"a": rng.normal(size=n), "b": rng.normal(size=n), "allnull": pa.array([None] * n, pa.float64()),
            "nothing": pa.nulls(n), "c": [None if i % 3 else float(i) for i in range(n)]}
    if with_strings:
        cols["kind"] = rng.choice(["x", "y"], n)
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table(cols), path)
    assert main(["features", "infer", "--data", str(path)]) == 0
    text = capsys.readouterr().out
    assert "# left out: allnull: no value in the training data (300 nulls)" in text
    assert "# left out: nothing: type null" in text
    names = [s.name for s in load_settings(TrainSettings, _write(tmp_path / "spec.yaml", text)).features]
    assert names == ["a", "b", "c", *(["kind"] if with_strings else [])]  # c has values: imputed, kept
    out = tmp_path / "m"
    assert main(["train", "--data", str(path), "--out", str(out), "--steps", "5", "--quiet"]) == 0
    assert "features: left out allnull: no value in the training data" in capsys.readouterr().out
    assert "allnull" not in KDSM.load(out).feature_names_
    spec = tmp_path / "named.yaml"
    spec.write_text("features:\n  - {name: a, type: numeric}\n  - {name: allnull, type: numeric, missing: impute}\n")
    assert main(["train", "--data", str(path), "--out", str(tmp_path / "m2"), "--config", str(spec), "--steps", "5",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "feature 'allnull': no value in the training data to learn from" in err and err.count("\n") == 1


def _write(path, text):
    path.write_text(text)
    return path


def test_offline_and_online_encode_identically(mixed_parquet):
    src = ParquetSource(mixed_parquet)
    table = pq.read_table(mixed_parquet)
    offline = src.encoder.encode_arrow(table)
    records = [json.loads(json.dumps(r)) for r in table.to_pylist()]  # the rows as JSON events
    online = src.encoder.encode_records(records)
    assert not offline.reasons and not online.reasons
    np.testing.assert_array_equal(offline.X, online.X)
    # The imputed rows hold the training median / mode and their indicator.
    ff = {f.spec.name: f for f in src.encoder.features}
    col = src.features.index
    rows_null = [i for i, r in enumerate(records) if r["device_id"] is None]
    assert (online.X[rows_null, col("device_id:missing")] == 1).all()
    assert (online.X[rows_null, col(f"device_id={ff['device_id'].fill}")] == 1).all()
    d_null = [i for i, r in enumerate(records) if r["geo"]["distance_km"] is None]
    assert (online.X[d_null, col("geo.distance_km")] == ff["geo.distance_km"].fill).all()


def test_a_decimal_column_encodes_as_its_json_number():
    """Arrow's decimal-to-float cast is not correctly rounded (2.675 -> 2.6750000000000003); JSON's is."""
    from decimal import Decimal

    text = ["2.675", "3.3", "9.95", "0.1", "-7.125", "123456.789"] * 5
    t = pa.table({"amount": pa.array([Decimal(v) for v in text], pa.decimal128(9, 3))})
    enc = _encoder([FeatureSpec(name="amount", type="numeric")], t)
    offline = enc.encode_arrow(t)
    online = enc.encode_records([json.loads(f'{{"amount": {v}}}') for v in text])
    np.testing.assert_array_equal(offline.X, online.X)


def _encoder(specs, table=None):
    table = table if table is not None else mixed_table(300)
    return FittedFeatures.fit(specs, profile(table.to_batches(), specs))


def test_missing_policies_type_changes_unseen_and_extra_fields():
    specs = [FeatureSpec(name="amount", type="numeric", missing="reject"),
             FeatureSpec(name="device_id", type="categorical", missing="impute"),
             FeatureSpec(name="merchant_category", type="categorical", missing="zero"),
             FeatureSpec(name="card_present", type="boolean", missing="impute"),
             FeatureSpec(name="km", path="geo.distance_km", type="numeric", missing="zero")]
    ff = _encoder(specs)
    base = {"amount": 10.0, "device_id": "ios", "merchant_category": "fuel", "card_present": True,
            "geo": {"distance_km": 3.0}, "extra": {"ignored": [1, 2]}}
    recs = [base,
            {**base, "amount": None},  # reject: dead letter
            {k: v for k, v in base.items() if k != "amount"},  # removed upstream: dead letter
            {**base, "device_id": None, "card_present": None},  # impute: mode + indicator
            {**base, "merchant_category": None, "geo": {}},  # zero: no category, 0
            {**base, "merchant_category": "crypto"},  # unseen: scored
            {**base, "amount": {"value": 10}},  # a number arriving as an object
            {**base, "merchant_category": 7.5},  # a float where a category belongs
            {**base, "card_present": "yes"},
            {**base, "geo": "DE"},  # a nested parent that is no longer an object
            {**base, "amount": float("nan")}]
    enc = ff.encode_records(recs)
    assert {i: r for i, (r, _) in enc.reasons.items()} == {
        1: "missing_feature", 2: "missing_feature", 6: "non_numeric_feature", 7: "type_mismatch",
        8: "type_mismatch", 9: "type_mismatch", 10: "non_finite_feature"}
    assert set(r for r, _ in enc.reasons.values()) <= set(REASONS)
    cols = ff.columns
    X = enc.X
    assert X[3, cols.index("device_id:missing")] == 1 and X[3, cols.index("card_present:missing")] == 1
    assert X[3, cols.index(f"device_id={ff.features[1].fill}")] == 1
    assert X[3, cols.index("card_present")] == float(ff.features[3].fill)
    mc = [j for j, c in enumerate(cols) if c.startswith("merchant_category=")]
    assert X[4, mc].sum() == 0 and X[4, cols.index("km")] == 0
    assert X[5, cols.index("merchant_category=<unseen>")] == 1 and X[5, mc].sum() == 1
    np.testing.assert_array_equal(X[0], ff.encode_records([{k: v for k, v in base.items() if k != "extra"}]).X[0])


def test_high_cardinality_frequency_and_hash_encodings():
    rng = np.random.default_rng(1)
    t = pa.table({"merchant": [f"m{int(v)}" for v in rng.zipf(1.5, 2000) % 500]})
    freq = _encoder([FeatureSpec(name="merchant", type="categorical", max_categories=20)], t)
    assert freq.features[0].kind == "frequency" and freq.columns == ["merchant:frequency"]
    X = freq.encode_records([{"merchant": "m1"}, {"merchant": "never-seen"}]).X
    assert X[0, 0] == pytest.approx(np.mean(np.array(t.column("merchant").to_pylist()) == "m1")) and X[1, 0] == 0
    hashed = _encoder([FeatureSpec(name="merchant", type="categorical", encoding="hash", hash_buckets=8)], t)
    X = hashed.encode_records([{"merchant": "m1"}, {"merchant": "m1"}, {"merchant": "new"}]).X
    assert X.shape == (3, 8) and (X.sum(axis=1) == 1).all() and (X[0] == X[1]).all()
    assert not hashed.category_columns.any()  # a new category is routine in a hashed feature: never scaled far off
    # The state survives JSON (what the artifact stores) unchanged.
    again = FittedFeatures.from_dict(json.loads(json.dumps(hashed.to_dict())))
    np.testing.assert_array_equal(again.encode_records([{"merchant": "new"}]).X, X[2:])


def test_numeric_transforms_clip_then_log1p():
    t = pa.table({"amount": [1.0, 10.0, 100.0, 1000.0]})
    ff = _encoder([FeatureSpec(name="amount", type="numeric", clip=(0, 500), log1p=True)], t)
    X = ff.encode_records([{"amount": 9.0}, {"amount": 5000.0}, {"amount": -3.0}]).X[:, 0]
    np.testing.assert_allclose(X, [np.log1p(9.0), np.log1p(500.0), 0.0])


def test_explanations_in_the_users_terms():
    specs = [FeatureSpec(name="amount", type="numeric"),
             FeatureSpec(name="merchant_category", type="categorical"),
             FeatureSpec(name="device_id", type="categorical", missing="impute")]
    ff = _encoder(specs)
    cols = ff.columns
    rec = {"amount": 12.5, "merchant_category": "crypto"}  # unseen category, device_id missing
    X = ff.encode_records([rec]).X
    share = np.zeros((1, len(cols)))
    expected = X.copy()
    # Most of the score on the category's columns (split over two), then on the missing indicator.
    share[0, cols.index("merchant_category=<unseen>")] = 0.35
    share[0, cols.index("merchant_category=fuel")] = 0.15
    share[0, cols.index("device_id:missing")] = 0.4
    share[0, cols.index("amount")] = 0.1
    expected[0, cols.index("merchant_category=grocery")] = 0.9  # the largest expected value: grocery
    expected[0, cols.index("merchant_category=<unseen>")] = 0.1
    expected[0, cols.index("device_id:missing")] = 0.0
    expected[0, cols.index("amount")] = 20.0
    items = ff.explain(X, share, expected, np.ones_like(X), top_k=3, records=[rec])[0]
    assert [it["text"] for it in items] == ['merchant_category = "crypto" (expected "grocery")', "device_id missing",
                                            "amount = 12.5 (expected 20)"]
    assert items[0]["contribution"] == pytest.approx(0.5) and items[0]["value"] == "crypto"
    # Without the raw record the category reads from its one-hot column.
    assert ff.explain(X, share, expected, np.ones_like(X), top_k=1)[0][0]["value"] == "<unseen>"
    # A column no training row set (the model's ``never_set``) is never the expected category, even where an unseen
    # category's own column keeps the largest expected value (it stands sqrt(n) units off, see test below).
    expected[0, cols.index("merchant_category=<unseen>")] = 30.0
    never_set = np.array([c == "merchant_category=<unseen>" for c in cols])
    assert ff.explain(X, share, expected, np.ones_like(X), top_k=1)[0][0]["expected"] == "<unseen>"
    assert ff.explain(X, share, expected, np.ones_like(X), top_k=1, never_set=never_set)[0][0]["expected"] == "grocery"
    # A boolean that never left its training value is expected at it (its training mode).
    always = pa.table({"card_present": [True] * 50})
    fb = _encoder([FeatureSpec(name="card_present", type="boolean")], always)
    Xb = fb.encode_records([{"card_present": False}]).X
    got = fb.explain(Xb, np.ones((1, 1)), np.zeros((1, 1)), np.ones((1, 1)), top_k=1, never_set=np.array([True]))
    assert got[0][0]["text"] == "card_present = false (expected true)"


def test_artifact_keeps_the_spec_and_its_hash(mixed_parquet, tmp_path):
    src = ParquetSource(mixed_parquet)
    X, _ = src.load()
    det = KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=20, precision="fp32"),
               refine=None).fit(X, features=src.encoder)
    assert det.schema_hash_ == src.encoder.spec_hash() != schema_hash(det.feature_names_)
    path = det.save(tmp_path / "m")
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["feature_spec"]["columns"] == det.feature_names_ and meta["schema_hash"] == det.schema_hash_
    back = KDSM.load(path, device="cpu")
    assert back.schema_hash_ == det.schema_hash_
    rec = pq.read_table(mixed_parquet).slice(0, 5).to_pylist()
    np.testing.assert_allclose(back.decision_function(back.features_.encode_records(rec).X), det.decision_function(X[:5]))
    # Tampering with the spec is caught (checksum), a forged matching checksum still fails the hash check.
    meta["feature_spec"]["features"][1]["spec"]["type"] = "numeric"
    (path / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="checksum"):
        KDSM.load(path)


def test_numeric_only_data_keeps_the_numeric_path(small_parquet_numeric):
    src = ParquetSource(small_parquet_numeric)
    assert src.encoder is None and src.features == ["f0", "f1", "f2"]


@pytest.fixture
def small_parquet_numeric(tmp_path):
    path = tmp_path / "num.parquet"
    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"id": np.arange(50), "f0": rng.normal(size=50), "f1": rng.normal(size=50),
                             "f2": rng.integers(0, 3, 50)}), path)
    return path


def test_spec_models_encoded_binary_columns_get_the_discrete_kappa(mixed_parquet):
    """README "Sigmas of encoded columns": one-hot, boolean and missing-indicator columns are binary (or
    constant, like a never-set <unseen>), so the kurtosis rule gives them kappa 1.8 and sigma 0.30."""
    src = ParquetSource(mixed_parquet)
    X, _ = src.load()
    det = KDSM(model=ModelConfig(width=8, depth=1), train=OptimConfig(steps=2, precision="fp32")).fit(X, features=src.encoder)
    cols = det.feature_names_
    binary = [c for c in cols if "=" in c or c.endswith(":missing") or c == "card_present"]
    assert {"merchant_category=grocery", "merchant_category=<unseen>", "device_id=ios", "geo.country=DE",
            "device_id:missing", "geo.distance_km:missing", "card_present"} <= set(binary)
    kappa = dict(zip(cols, det.kappas_.tolist(), strict=True))
    sigma = dict(zip(cols, det.sigmas_.tolist(), strict=True))
    assert {c: kappa[c] for c in binary} == {c: 1.8 for c in binary}
    assert all(sigma[c] == pytest.approx(0.5 * (1 + 0.33 * (1.8 - 3))) for c in binary)
    assert kappa["amount"] != 1.8 and kappa["geo.distance_km"] != 1.8  # numbers keep their own kurtosis


def test_spec_that_does_not_fit_the_data_is_one_clear_error(mixed_parquet):
    with pytest.raises(DataError, match="feature 'amount' is categorical in the spec but column 'amount' is double"):
        ParquetSource(mixed_parquet, spec=[FeatureSpec(name="amount", type="categorical")])
    with pytest.raises(DataError, match="no column 'geo.altitude'"):
        ParquetSource(mixed_parquet, spec=[FeatureSpec(name="alt", path="geo.altitude", type="numeric")])
    with pytest.raises(ValueError, match="log1p and clip apply to numeric"):
        FeatureSpec(name="c", type="categorical", log1p=True)


def test_spec_decoder_gives_the_numeric_decoders_reason_codes():
    names = ["f0", "f1", "f2"]
    t = pa.table({n: np.linspace(0, 1, 20) for n in names})
    specs = [FeatureSpec(name=n, type="numeric", clip=(None, 1e300)) for n in names]  # not numeric-only
    spec_dec = SpecDecoder(_encoder(specs, t), schema_hash="h")
    num_dec = Decoder(names, schema_hash="h")
    corpus = malformed_corpus(names, 65536)
    good = [json.dumps({"id": i, "f0": 0.1 * i, "f1": 2, "f2": -1.5, "other": "x"}).encode() for i in range(4)]
    good.append(b'{"id": 123456789012345678901234567890, "f0": 1, "f1": 2, "f2": 3}')  # an int id orjson reads as float
    values = good + [raw for _, raw, _ in corpus]
    a, b = spec_dec.decode(values), num_dec.decode(values)
    np.testing.assert_array_equal(a.X, b.X)
    assert a.ids == b.ids and a.rows.tolist() == b.rows.tolist() == list(range(5))
    expect = [("missing_feature" if kind == "null_feature" else reason) for kind, _, reason in corpus]  # null = missing
    assert [r.reason for r in a.rejects] == expect
    assert [r.index for r in a.rejects] == list(range(5, 5 + len(corpus)))
    assert len(a.records) == 5 and a.records[0]["other"] == "x"


def test_score_job_applies_the_models_spec(mixed_parquet, tmp_path):
    from offline_train.job import score_job

    src = ParquetSource(mixed_parquet)
    X, _ = src.load()
    det = KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=20, precision="fp32")).fit(X, features=src.encoder)
    det.save(tmp_path / "m")
    t = mixed_table(50, seed=5)
    amount = t.column("amount").to_pylist()
    amount[3] = None  # amount is missing: reject -> the row is invalid, not a crash
    t = t.set_column(t.schema.get_field_index("amount"), "amount", pa.array(amount))
    pq.write_table(t, tmp_path / "new.parquet")
    counts = score_job(tmp_path / "m", tmp_path / "new.parquet", tmp_path / "scored.parquet", log=lambda m: None)
    assert counts == {"rows": 50, "invalid": 1}
    scored = pq.read_table(tmp_path / "scored.parquet")
    assert scored.column("severity").to_pylist()[3] == "invalid" and scored.column("score").null_count == 1
    rows = t.to_pylist()
    ok = [i for i in range(50) if i != 3]
    parts = det.score_parts(det.features_.encode_records([rows[i] for i in ok]).X)
    np.testing.assert_allclose(np.asarray(scored.column("score").to_pylist())[ok].astype(float), parts.scores)
    # The blend's parts and the part that led, as alerts carry them; null for the invalid row.
    for column, values in (("score_network", parts.network), ("score_isolation", parts.forest), ("score_knn", parts.knn)):
        got = scored.column(column).to_pylist()
        assert got[3] is None
        np.testing.assert_allclose(np.asarray(got, dtype=object)[ok].astype(float), values)
    leading = scored.column("leading_part").to_pylist()
    assert leading[3] is None
    assert [leading[i] for i in ok] == det.blend_.leading(parts.network, parts.forest, parts.knn).tolist()


def test_absent_column_follows_its_missing_policy_offline(mixed_parquet, tmp_path, capsys):
    """A column (or struct leaf) gone from a Parquet file reads as all null, as an absent JSON field does online."""
    from offline_train.job import score_job

    src = ParquetSource(mixed_parquet)  # inferred: device_id and geo.distance_km impute, amount reject
    X, _ = src.load()
    det = KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=20, precision="fp32")).fit(X, features=src.encoder)
    det.save(tmp_path / "m")
    t = mixed_table(40, seed=7)
    geo = pa.array([{"country": g["country"]} for g in t.column("geo").to_pylist()])  # the distance_km leaf is gone
    t = t.drop_columns(["device_id"]).set_column(t.schema.get_field_index("geo") - 1, "geo", geo)
    pq.write_table(t, tmp_path / "evolved.parquet")
    counts = score_job(tmp_path / "m", tmp_path / "evolved.parquet", tmp_path / "scored.parquet", log=lambda m: None)
    assert counts == {"rows": 40, "invalid": 0}
    # The streamer's encoding of the same events, which lack both fields.
    records = [json.loads(json.dumps(r)) for r in t.to_pylist()]
    assert "device_id" not in records[0] and records[0]["geo"].keys() == {"country"}
    online = det.features_.encode_records(records)
    assert not online.reasons
    cols = det.features_.columns
    assert (online.X[:, cols.index("device_id:missing")] == 1).all()
    assert (online.X[:, cols.index("geo.distance_km:missing")] == 1).all()
    scored = pq.read_table(tmp_path / "scored.parquet")
    np.testing.assert_allclose(np.asarray(scored.column("score").to_pylist(), float), det.decision_function(online.X))
    # Training-data reading (retraining with the model's spec) goes through the same check and encoder.
    Xs, _ = ParquetSource(tmp_path / "evolved.parquet", encoder=det.features_).load()
    np.testing.assert_array_equal(Xs, online.X)
    # Fitting a spec on a file where an impute feature never has a value is refused: nothing to impute with.
    with pytest.raises(DataError, match="'device_id': no value in the training data"):
        ParquetSource(tmp_path / "evolved.parquet", spec=[FeatureSpec(name="amount", type="numeric"),
                                                          FeatureSpec(name="device_id", type="categorical", missing="impute")])

    # A reject feature's column gone: the file is refused in one line, as `kdsm score` prints it.
    pq.write_table(mixed_table(40, seed=7).drop_columns(["amount"]), tmp_path / "no_amount.parquet")
    capsys.readouterr()
    assert main(["score", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "no_amount.parquet"),
                 "--out", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "feature 'amount' (missing: reject): no column 'amount' in the data" in err
    assert not (tmp_path / "x.parquet").exists()
    # A nested parent that became a plain column is a type change, not an absence: refused too.
    t2 = mixed_table(40, seed=7)
    t2 = t2.set_column(t2.schema.get_field_index("geo"), "geo", pa.array(["DE"] * 40))
    pq.write_table(t2, tmp_path / "flat_geo.parquet")
    with pytest.raises(DataError, match="column 'geo' is string, not a struct holding 'geo.country'"):
        score_job(tmp_path / "m", tmp_path / "flat_geo.parquet", tmp_path / "y.parquet", log=lambda m: None)


@pytest.mark.parametrize("knn", [False, True])
def test_an_unseen_category_stands_far_off_alerts_and_explains_in_seen_terms(tmp_path, knn):
    """README "Unseen categories": a category column never set in n training rows is scaled as a one-in-n event
    (1/sqrt(n)), so an unseen category scores above the critical threshold with or without the k-NN part (unscaled
    it stood at the warning threshold, and below it with the part on), and its expected value is a seen category."""
    from offline_train.job import train_job
    from streamer.config import Settings

    pq.write_table(mixed_table(1500, seed=3), tmp_path / "train.parquet")
    s = Settings()
    s.model.width, s.model.depth, s.train.steps, s.score.knn = 64, 2, 400, knn
    s.features = [FeatureSpec(name="amount", type="numeric", log1p=True),
                  FeatureSpec(name="merchant_category", type="categorical"),
                  FeatureSpec(name="country", path="geo.country", type="categorical"),
                  FeatureSpec(name="distance_km", path="geo.distance_km", type="numeric", missing="impute")]
    train_job(s, tmp_path / "train.parquet", tmp_path / "m", progress=False, log=lambda m: None)
    det = KDSM.load(tmp_path / "m", device="cpu")
    unseen = det.feature_names_.index("merchant_category=<unseen>")
    n = det.data_summary_["train_rows"]
    assert det.scaler_.std_[unseen] == pytest.approx(1 / np.sqrt(n)) and det.scaler_.mean_[unseen] == 0.0
    assert det.scaler_.std_[det.feature_names_.index("merchant_category=fuel")] == 1.0  # seen categories: unscaled

    rows = mixed_table(300, seed=9).to_pylist()
    planted = [dict(r, merchant_category="crypto") for r in rows[:15]]
    X = det.features_.encode_records(planted).X
    assert (det.decision_function(X) >= det.thresholds_["critical"]).all()
    normal = det.decision_function(det.features_.encode_records(rows).X)
    assert np.mean(normal >= det.thresholds_["warning"]) < 0.05
    for items in det.explain(X, records=planted).items:
        cat = next(it for it in items if it["name"] == "merchant_category")
        assert cat["value"] == "crypto" and cat["expected"] in ("grocery", "fuel", "travel")
