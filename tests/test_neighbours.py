"""The blend's opt-in third part: the distance to the k-th nearest kept training row (offline_train.neighbours)."""

import numpy as np
import pytest
import torch
from conftest import make_blobs
from sklearn.neighbors import NearestNeighbors

from offline_train.artifact import ArtifactError, read_artifact, write_artifact
from offline_train.blend import Blend
from offline_train.config import ModelConfig, OptimConfig, RefineConfig, ScoreConfig
from offline_train.detector import KDSM
from offline_train.neighbours import NeighbourScorer, reference_rows
from offline_train.refine import lowest


def _knn_model(X, **score):
    return KDSM(model=ModelConfig(width=32, depth=2), train=OptimConfig(steps=150, precision="fp32", seed=0),
                score=ScoreConfig(knn=True, **score)).fit(X)


@pytest.fixture(scope="module")
def contaminated():
    """1200 inliers and 60 planted far rows (5%) mixed into the training history."""
    X, out = make_blobs(n=1200, n_out=60, seed=3)
    return np.vstack([X, out]), 1200


def test_distances_match_an_exact_search_and_reference_rows_skip_themselves():
    rng = np.random.default_rng(1)
    Z = rng.standard_t(3, size=(900, 7)).astype(np.float32)  # heavy tails: far rows and near ties
    ref = np.arange(0, 900, 3)
    knn = NeighbourScorer.from_rows(Z[ref], k=10)
    exact = NearestNeighbors(n_neighbors=11).fit(Z[ref])
    new = rng.standard_t(3, size=(600, 7)).astype(np.float32)  # more rows than one distance block
    np.testing.assert_allclose(knn(torch.from_numpy(new)).numpy(), exact.kneighbors(new, 10)[0][:, 9], rtol=1e-4, atol=1e-3)
    d = knn.training_distances(torch.from_numpy(Z), ref).numpy()
    full = exact.kneighbors(Z, 11)[0]
    in_ref = np.isin(np.arange(900), ref)
    np.testing.assert_allclose(d[in_ref], full[in_ref, 10], rtol=1e-4, atol=1e-3)  # itself, at distance 0, skipped
    np.testing.assert_allclose(d[~in_ref], full[~in_ref, 9], rtol=1e-4, atol=1e-3)


def test_k_is_capped_by_the_reference_and_a_one_row_reference_is_refused():
    assert NeighbourScorer.from_rows(np.zeros((4, 2)), k=10).k == 3
    with pytest.raises(ValueError, match="at least 2 rows"):
        NeighbourScorer.from_rows(np.zeros((1, 2)), k=10)
    ref = reference_rows(np.arange(100, 200), 30, seed=0)
    assert len(ref) == 30 and np.all(np.diff(ref) > 0) and ref.min() >= 100
    np.testing.assert_array_equal(ref, reference_rows(np.arange(100, 200), 30, seed=0))  # seeded


def test_the_reference_is_a_sample_of_the_rows_the_network_keeps(contaminated):
    X, n_in = contaminated
    det = _knn_model(X, knn_rows=256)
    ref = det.neighbours_.reference.numpy()
    assert ref.shape == (256, X.shape[1])
    # Each reference row is a standardised training row the trained network ranks among the kept share.
    train_X = det._holdout_split(X)[0]
    Z = det.standardise(train_X).astype(np.float32)
    network = det.score_parts(train_X).network
    kept = lowest(network, det.train_summary_.refine["keep"])
    index = {row.tobytes(): i for i, row in enumerate(Z)}
    picked = np.array([index[row.tobytes()] for row in ref])
    assert np.isin(picked, kept).all()
    # So the planted rows, 5% of the history, are (nearly) absent from it.
    planted = np.array([np.any(np.all(train_X[i] == X[n_in:], axis=1)) for i in picked])
    assert planted.mean() < 0.01


def test_the_score_is_the_largest_of_three_parts_and_round_trips(contaminated, tmp_path):
    X, n_in = contaminated
    det = _knn_model(X)
    assert det.blend_.has_knn and det.neighbours_.k == 10
    _, out = make_blobs(n=10, n_out=20, seed=9)
    rows = np.vstack([X[:200], out])
    p = det.score_parts(rows)
    assert p.knn is not None and (p.knn >= 0).all()
    np.testing.assert_allclose(p.scores, det.blend_(p.network, p.forest, p.knn))
    z = det.blend_.z_scores(p.network, p.forest, p.knn)
    np.testing.assert_allclose(np.log(p.scores), det.blend_.network_mean + det.blend_.network_std * np.max(z, axis=0))
    assert p.knn[200:].min() > np.quantile(p.knn[:200], 0.99)  # the far rows are far from the kept rows
    path = det.save(tmp_path / "m")
    tensors, meta = read_artifact(path)
    assert meta["knn"] == {"rows": 512, "d": X.shape[1], "k": 10} and {"knn_mean", "knn_std"} <= set(meta["blend"])
    assert tensors["knn.reference"].shape == (512, X.shape[1])
    back = KDSM.load(path, device="cpu").score_parts(rows)
    np.testing.assert_allclose(back.scores, p.scores, rtol=1e-12)
    np.testing.assert_allclose(back.knn, p.knn, rtol=1e-12)


def test_without_refinement_the_reference_is_drawn_from_every_row():
    X, _ = make_blobs(n=300, seed=4)
    det = KDSM(model=ModelConfig(width=16, depth=1), train=OptimConfig(steps=30, precision="fp32"),
               refine=RefineConfig(enabled=False), score=ScoreConfig(knn=True, knn_rows=1000)).fit(X)
    assert det.neighbours_.reference.shape[0] == len(det._holdout_split(X)[0])


def test_a_knn_part_without_its_blend_moments_is_refused_in_one_line(contaminated, tmp_path):
    X, _ = contaminated
    tensors, meta = read_artifact(_knn_model(X).save(tmp_path / "m"))
    meta = {k: v for k, v in meta.items() if k not in ("checksum", "format")}
    two_parts = {k: v for k, v in meta["blend"].items() if not k.startswith("knn_")}
    path = write_artifact(tmp_path / "b", tensors, {**meta, "blend": two_parts})
    with pytest.raises(ArtifactError, match="do not fit together") as e:
        KDSM.load(path, device="cpu")
    assert "\n" not in str(e.value)


def test_an_artifact_from_before_the_knn_part_loads_with_two_parts(contaminated, tmp_path):
    X, n_in = contaminated
    det = _knn_model(X)
    tensors, meta = read_artifact(det.save(tmp_path / "m"))
    old_score = {k: v for k, v in meta["score_config"].items() if not k.startswith("knn")}  # its ScoreConfig had no knn
    old = {k: v for k, v in meta.items() if k not in ("checksum", "format", "knn")}
    path = write_artifact(tmp_path / "old", {k: v for k, v in tensors.items() if not k.startswith("knn.")},
                          {**old, "score_config": old_score,
                           "blend": {k: v for k, v in meta["blend"].items() if not k.startswith("knn_")}})
    back = KDSM.load(path, device="cpu")
    assert not back.score_config.knn and back.neighbours_ is None
    p = back.score_parts(X[n_in - 5:n_in + 5])
    assert p.knn is None
    np.testing.assert_allclose(p.scores, back.blend_(p.network, p.forest))


def test_rows_far_outside_the_data_score_finite_and_in_order(contaminated):
    """The part's z-score grows linearly with the distance: exp of it would overflow for far rows (twenty-seventh pass)."""
    import warnings

    X, _ = contaminated
    det = _knn_model(X)
    far = np.zeros((4, X.shape[1]))
    far[:, 0] = det.scaler_.mean_[0] + np.array([1e2, 1e4, 1e5, 1e300]) * det.scaler_.std_[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        p = det.score_parts(far)
    assert np.isfinite(p.scores).all() and (np.diff(p.scores) >= 0).all() and p.scores[2] > p.scores[0]
    assert (p.scores >= max(det.thresholds_.values())).all()


def test_blend_moments_and_distances_go_together():
    b = Blend.fit(np.ones(10), np.full(10, 0.4))
    with pytest.raises(ValueError, match="exactly when"):
        b(np.ones(2), np.full(2, 0.4), np.ones(2))
    with pytest.raises(KeyError):
        Blend.from_dict({**b.to_dict(), "knn_mean": 1.0})  # one moment without the other


def test_knn_part_needs_the_forest():
    with pytest.raises(ValueError, match="needs score.isolation_forest"):
        ScoreConfig(knn=True, isolation_forest=False)


def test_alerts_carry_the_knn_part(contaminated):
    import json

    from kafka.consumer.fetcher import ConsumerRecord

    from offline_train.blend import PART_NAMES
    from streamer.pipeline.alerts import build_alerts
    from streamer.pipeline.batch import RecordBatch
    from streamer.pipeline.decode import Decoder
    from streamer.pipeline.scorer import Scorer

    X, n_in = contaminated
    det = _knn_model(X)
    names = det.feature_names_
    rows = X[n_in - 3:n_in + 3]  # three inliers, three planted rows
    values = [json.dumps({"id": k, "ts": 1.0, **dict(zip(names, r.tolist(), strict=True))}).encode()
              for k, r in enumerate(rows)]
    rb = RecordBatch.from_records([ConsumerRecord("ev", 0, 0, k, 1, 0, None, v, [], None, -1, len(v), -1)
                                   for k, v in enumerate(values)])
    dec = Decoder(names, schema_hash=det.schema_hash_).decode(rb.values)
    th = {"warning": 0.0}  # every row alerts
    res = Scorer(top_features=2).score(det, dec.X, th)
    parts = det.score_parts(dec.X)
    b = det.blend_
    z = np.vstack(b.z_scores(parts.network, parts.forest, parts.knn))
    leads = []
    for k, (_, value) in enumerate(build_alerts(rb, dec, res, det, th)):
        alert = json.loads(value)
        got = alert["score_parts"]
        assert got == pytest.approx({"network": parts.network[k], "isolation": parts.forest[k], "knn": parts.knn[k]})
        # The leading part is the one whose z-score the score is mapped from; the explanation is the network's.
        lead = PART_NAMES.index(alert["leading_part"])
        assert z[lead, k] == z[:, k].max() and alert["explained_by"] == "network"
        assert alert["score"] == pytest.approx(np.exp(b.network_mean + b.network_std * z[lead, k]), rel=1e-6)
        leads.append(alert["leading_part"])
    assert len(set(leads)) > 1  # not a constant: inliers and far rows are led by different parts here


def test_knn_part_scores_alike_on_the_scoring_device(contaminated, tmp_path):
    """``auto`` is CUDA where present: there the search runs on the GPU (topk instead of numpy's introselect) and
    must give the CPU's distances to float tolerance; on a CPU machine both sides run on the CPU."""
    from offline_train.model import resolve_device

    X, n_in = contaminated
    path = _knn_model(X).save(tmp_path / "m")
    dev = resolve_device("auto")
    cpu, here = KDSM.load(path, device="cpu"), KDSM.load(path, device=str(dev))
    assert here.neighbours_.reference.device.type == dev.type
    a, b = cpu.score_parts(X), here.score_parts(X)
    np.testing.assert_allclose(b.knn, a.knn, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(b.scores, here.blend_(b.network, b.forest, b.knn))
