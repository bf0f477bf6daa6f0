"""Finite but extreme feature values score finite, offline and in the library alike (no float32 overflow to NaN)."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_blobs

from offline_train import detector as detector_module
from offline_train.detector import KDSM
from streamer.ops.cli import main

F32_MAX = float(np.finfo(np.float32).max)  # 3.4028235e38


def extreme_rows(d: int) -> np.ndarray:
    """One row per case: a single huge feature, every feature huge, both signs, at and just inside float32's range."""
    rows = []
    for v in (1e308, -1e308, 1e38, -1e38, np.nextafter(F32_MAX, 0), -np.nextafter(F32_MAX, 0), 1e300, -1e300):
        one = np.zeros(d)
        one[0] = v
        rows += [one, np.full(d, v)]
    rows.append(np.array([(-1) ** j * 1e300 for j in range(d)]))
    rows.append(np.full(d, np.finfo(np.float32).tiny))
    return np.vstack(rows)


@pytest.fixture(scope="module")
def det(tiny_model_dir):
    return KDSM.load(tiny_model_dir, device="cpu")


def test_extreme_rows_score_finite_and_above_every_threshold(det):
    R = extreme_rows(det.n_features_in_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no overflow warning may escape the scoring path either
        scores, F = det.score_outputs(R)
    assert np.isfinite(scores).all() and np.isfinite(F).all(), scores
    np.testing.assert_array_equal(det.decision_function(R), scores)
    huge = np.abs(R).max(axis=1) > 1e30
    assert (scores[huge] >= max(det.thresholds_.values())).all(), scores[huge]
    ex = det.explain(R, top_k=3)
    assert np.isfinite(ex.expected).all() and np.isfinite(ex.contribution).all()


def test_scores_saturate_at_the_documented_bound(det):
    """Beyond Z_BOUND standard deviations a value scores as if it were at the bound; inside, it is not clipped."""
    bound = detector_module.Z_BOUND
    d = det.n_features_in_
    sd = det.scaler_.std_[0]
    rows = np.zeros((4, d))
    rows[:, 0] = det.scaler_.mean_[0] + np.array([2 * bound, 10 * bound, np.inf, bound / 10]) * sd
    rows[2, 0] = 1e308
    s = det.decision_function(rows)
    assert s[0] == s[1] == s[2]
    assert s[3] < s[0]  # inside the bound the score still grows with the value


def test_kdsm_score_writes_finite_scores_for_extreme_rows(det, tiny_model_dir, tmp_path):
    R = extreme_rows(det.n_features_in_)
    X = np.vstack([make_blobs(n=20, seed=5)[0], R])
    data = tmp_path / "extreme.parquet"
    pq.write_table(pa.table({"id": np.arange(len(X)), **{n: X[:, j] for j, n in enumerate(det.feature_names_)}}), data)
    out = tmp_path / "scored.parquet"
    assert main(["score", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(out)]) == 0
    t = pq.read_table(out)
    scores = np.asarray(t.column("score").to_pylist(), dtype=float)
    assert np.isfinite(scores).all(), scores
    np.testing.assert_allclose(scores, det.decision_function(X), rtol=1e-6)
    assert "invalid" not in t.column("severity").to_pylist()
